import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: ['./packages/queue/src/schema.ts', './packages/saga/src/schema.ts'],
  out: './migrations',
  schemaFilter: ['skiplock'],
  casing: undefined,
});
