/**
 * The grants the saga tables need under skiplock's least-privilege roles (see `queueGrants` in
 * `@skiplock/queue/engine`, which covers the schema and the jobs table). The CLI's
 * `skiplock roles` runs the queue's grants, then these.
 *
 * The producer starts sagas (inserts the saga and its first step, whose job it enqueues through
 * the queue), signals them (stores the signal, and when the saga waits for it, marks it consumed
 * and advances the saga: it locks the saga row `FOR UPDATE`, updates the saga and its steps and
 * enqueues the next step's job) and reads them. So it needs SELECT, INSERT and UPDATE on the saga
 * tables, never DELETE; on the queue's jobs table it still only inserts and reads (the queue
 * grants that). The worker has every right on these tables that it needs to run steps,
 * compensate, and reconcile.
 */
import {
  bookkeepingGrants,
  grantsOnTable,
  roleIdentifiers,
  type RoleNames,
} from '@skiplock/queue/engine';
import { sagaMigrations } from './migrate.js';

const TABLES = ['sagas', 'saga_steps', 'saga_signals'] as const;

/** SQL statements, each safe to run again, granting the saga tables to the worker and producer. */
export function sagaGrants(roles: RoleNames): string[] {
  const { worker, producer } = roleIdentifiers(roles);
  return [
    bookkeepingGrants(roles, sagaMigrations.table),
    ...TABLES.map((table) =>
      grantsOnTable(table, [
        `GRANT SELECT, INSERT, UPDATE, DELETE ON skiplock.${table} TO ${worker}`,
        `REVOKE DELETE, TRUNCATE ON skiplock.${table} FROM ${producer}`,
        `GRANT SELECT, INSERT, UPDATE ON skiplock.${table} TO ${producer}`,
      ]),
    ),
    grantsOnTable('saga_steps', [
      `GRANT USAGE ON SEQUENCE skiplock.saga_steps_id_seq TO ${worker}, ${producer}`,
    ]),
  ];
}
