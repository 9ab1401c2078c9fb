import { defineConfig } from 'drizzle-kit';

// The outbox table only, in the queue's `skiplock` schema but migrated by this package.
export default defineConfig({
  dialect: 'postgresql',
  schema: ['./src/schema.ts'],
  out: './migrations',
  schemaFilter: ['skiplock'],
});
