import { sql } from 'drizzle-orm';
import { sagaRowColumns } from './sagas.js';

/**
 * Serializes, until the transaction ends, everything that decides who holds a lock key: a start
 * (holder check and insert) and a saga's end (release and the next one's turn). A transaction
 * advisory lock on a 64-bit hash of the name and key; two keys sharing a hash only wait for each
 * other. It must be a statement of its own: a READ COMMITTED statement's snapshot is taken before
 * it starts, so a check in the same statement would miss what the previous holder just committed.
 */
export function lockKeyTurn(name: string, key: string) {
  return sql`SELECT pg_advisory_xact_lock(hashtextextended(${`skiplock.saga:${name}:${key}`}, 0))`;
}

export interface LockHolderRow {
  id: string;
  status: 'queued' | 'running' | 'waiting' | 'compensating';
}

/** The active saga holding the key, else the first one queued for it, else nothing. */
export function selectLockHolder(name: string, key: string) {
  return sql`
    SELECT id, status FROM skiplock.sagas
    WHERE status IN ('running', 'waiting', 'compensating', 'queued') AND name = ${name}
      AND lock_key = ${key}
    ORDER BY status = 'queued', created_at, id
    LIMIT 1`;
}

/**
 * The next saga queued for the key, locked, when no saga holds it: the one started first. Its
 * start time is the clock at its start under `lockKeyTurn`, so this is the order the starts took
 * the key.
 */
export function lockNextQueued(name: string, key: string) {
  return sql`
    SELECT ${sagaRowColumns} FROM skiplock.sagas
    WHERE status = 'queued' AND name = ${name} AND lock_key = ${key}
      AND NOT EXISTS (
        SELECT 1 FROM skiplock.sagas a
        WHERE a.status IN ('running', 'waiting', 'compensating') AND a.name = ${name}
          AND a.lock_key = ${key})
    ORDER BY created_at, id
    LIMIT 1
    FOR UPDATE`;
}

export interface OrphanQueueRow {
  name: string;
  lock_key: string;
}

/**
 * Keys with queued sagas and no active holder, up to `limit`: only when a holder's end could not
 * start the next one (no runtime there knew its version) or a holder row was deleted by hand.
 */
export function selectOrphanQueues(limit: number) {
  return sql`
    SELECT DISTINCT q.name, q.lock_key FROM skiplock.sagas q
    WHERE q.status = 'queued' AND q.lock_key IS NOT NULL
      AND NOT EXISTS (
        SELECT 1 FROM skiplock.sagas a
        WHERE a.status IN ('running', 'waiting', 'compensating') AND a.name = q.name
          AND a.lock_key = q.lock_key)
    LIMIT ${limit}`;
}
