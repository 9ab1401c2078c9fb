import { fileURLToPath } from 'node:url';
import {
  migrate as migrateQueue,
  type MigrateOptions,
  type MigrateResult,
  type MigrationSet,
} from '@skiplock/queue';

/**
 * The outbox table's migrations, shipped in this package (beside `src/` and `dist/` alike) and
 * recorded in `skiplock.outbox_migrations`, apart from the queue's and the saga's.
 */
export const outboxMigrations: MigrationSet = {
  name: 'outbox',
  folder: fileURLToPath(new URL('../migrations', import.meta.url)),
  table: 'outbox_migrations',
};

/**
 * Migrates the outbox table, after the queue's own (whose migration runner and lock it shares).
 * An application with sagas passes `include: [outboxMigrations]` to the saga's `migrate` instead.
 */
export function migrate(options: MigrateOptions = {}): Promise<MigrateResult> {
  return migrateQueue({ ...options, include: [outboxMigrations, ...(options.include ?? [])] });
}
