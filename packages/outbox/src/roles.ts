/**
 * The grants the outbox's table needs under skiplock's least-privilege roles (see `queueGrants`
 * in `@skiplock/queue/engine`, which covers the schema). `skiplock roles` runs them after the
 * queue's and the saga's when this package is installed beside the CLI.
 *
 * The producer publishes (an insert, returning the ids, under a key's transaction advisory lock,
 * which needs no grant) inside its business transaction: INSERT and SELECT, and the id sequence;
 * never UPDATE or DELETE, so it cannot mark a message delivered or remove one. The worker runs the
 * relay (claims, settles, sends dead, deletes delivered rows) and a saga step that publishes, and
 * revives dead messages (`skiplock outbox retry`): every right on the table.
 */
import {
  bookkeepingGrants,
  grantsOnTable,
  roleIdentifiers,
  type RoleNames,
} from '@skiplock/queue/engine';
import { outboxMigrations } from './migrate.js';

/** SQL statements, each safe to run again, granting the outbox's tables to the worker and producer. */
export function outboxGrants(roles: RoleNames): string[] {
  const { worker, producer } = roleIdentifiers(roles);
  return [
    bookkeepingGrants(roles, outboxMigrations.table),
    grantsOnTable('outbox_messages', [
      `GRANT SELECT, INSERT, UPDATE, DELETE ON skiplock.outbox_messages TO ${worker}`,
      `REVOKE UPDATE, DELETE, TRUNCATE ON skiplock.outbox_messages FROM ${producer}`,
      `GRANT SELECT, INSERT ON skiplock.outbox_messages TO ${producer}`,
      `GRANT USAGE ON SEQUENCE skiplock.outbox_messages_id_seq TO ${worker}, ${producer}`,
    ]),
  ];
}
