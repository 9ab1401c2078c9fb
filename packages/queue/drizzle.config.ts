import { defineConfig } from 'drizzle-kit';

// The queue's own tables only; the saga package generates its tables into its own folder.
export default defineConfig({
  dialect: 'postgresql',
  schema: ['./src/schema.ts'],
  out: './migrations',
  schemaFilter: ['skiplock'],
});
