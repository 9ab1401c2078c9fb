import { sql } from 'drizzle-orm';

/**
 * Advisory lock keys, one per kind of singleton work, for the queue and for the packages built on
 * it (the saga's reconciler takes its key through `@skiplock/queue/engine`), so every skiplock
 * lock lives in one namespace. Two ints in a private namespace so they do not collide with an
 * application's own single-key advisory locks.
 */
export const LOCK_NAMESPACE = 0x5c10c;
export const LockKeys = { migrate: 1, sweep: 2, retention: 3, sagaReconcile: 4 } as const;
export type LockKey = (typeof LockKeys)[keyof typeof LockKeys];
/**
 * The class of per-schedule locks, whose second int is the schedule name's `hashtext` (the
 * outbox's per-key publish locks take the class after it, `LOCK_NAMESPACE + 2`).
 */
export const SCHEDULE_LOCK_CLASS = LOCK_NAMESPACE + 1;

export function tryTransactionLock(key: LockKey) {
  return sql`SELECT pg_try_advisory_xact_lock(${LOCK_NAMESPACE}, ${key}) AS locked`;
}

/**
 * A condition that sets `lock_timeout` to `waitMs` for the statement's own transaction and is
 * always true: an uncorrelated subquery, run once before any row is fetched and so before any
 * row lock is waited for. Then a wait for a row another transaction holds ends after `waitMs`
 * with SQLSTATE 55P03. Only for a statement sent on its own (autocommit): in a caller's
 * transaction it would change that transaction's `lock_timeout` for its rest.
 */
export const lockTimeoutFor = (waitMs: number) =>
  sql`(SELECT set_config('lock_timeout', ${`${waitMs}ms`}, true)) IS NOT NULL`;
