import { fileURLToPath } from 'node:url';
import {
  migrate as migrateQueue,
  type MigrateOptions,
  type MigrateResult,
  type MigrationSet,
} from '@skiplock/queue';

/**
 * The saga tables' migrations, shipped in this package (beside `src/` and `dist/` alike) and
 * recorded in `skiplock.saga_migrations`, apart from the queue's own.
 */
export const sagaMigrations: MigrationSet = {
  name: 'saga',
  folder: fileURLToPath(new URL('../migrations', import.meta.url)),
  table: 'saga_migrations',
};

/**
 * Migrates everything sagas need: the queue's tables, then the saga tables, under the queue's
 * migration lock, so concurrent starters do not collide. The one call an application with sagas
 * makes at start-up.
 */
export function migrate(options: MigrateOptions = {}): Promise<MigrateResult> {
  return migrateQueue({ ...options, include: [sagaMigrations, ...(options.include ?? [])] });
}
