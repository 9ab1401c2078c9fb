import { defineConfig } from 'drizzle-kit';

// The example's own migrations, apart from the library's: run from examples/billing.
export default defineConfig({
  dialect: 'postgresql',
  schema: ['./src/schema.ts'],
  out: './migrations',
  schemaFilter: ['billing'],
});
