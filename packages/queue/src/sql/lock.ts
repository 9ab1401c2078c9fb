import { sql } from 'drizzle-orm';

/**
 * Advisory lock keys, one per kind of singleton work. Two ints in a private namespace so they do
 * not collide with an application's own single-key advisory locks.
 */
export const LOCK_NAMESPACE = 0x5c10c;
export const LockKeys = { migrate: 1, sweep: 2, retention: 3 } as const;

export function tryTransactionLock(key: number) {
  return sql`SELECT pg_try_advisory_xact_lock(${LOCK_NAMESPACE}, ${key}) AS locked`;
}
