// Every package that owns tables, each with its drizzle.config.ts and migrations/ folder.
export const migrationPackages = [
  'packages/queue',
  'packages/saga',
  'packages/outbox',
  'examples/billing',
];
