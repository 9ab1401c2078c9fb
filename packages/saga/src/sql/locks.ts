import { sql } from 'drizzle-orm';
import { sagaRowColumns } from './sagas.js';
import type { SagaStatus } from '../schema.js';

/**
 * Serializes, until the transaction ends, everything that decides who holds a lock key: a start
 * (holder check and insert) and a saga's end (release and the next one's turn). A transaction
 * advisory lock on a 64-bit hash of the name and key; two keys sharing a hash only wait for each
 * other. It must be a statement of its own, in READ COMMITTED: each statement there takes a new
 * snapshot, so the check after it sees what the previous holder committed; under REPEATABLE READ
 * or SERIALIZABLE the snapshot is the transaction's first, so the statement also returns the
 * isolation level for the caller to refuse. `wait: false` tries the lock instead (`taken`).
 */
export function lockKeyTurn(name: string, key: string, wait = true) {
  const id = sql`hashtextextended(${`skiplock.saga:${name}:${key}`}, 0)`;
  return sql`
    SELECT ${wait ? sql`true` : sql`t`} AS taken, current_setting('transaction_isolation') AS isolation
    FROM ${wait ? sql`pg_advisory_xact_lock(${id})` : sql`pg_try_advisory_xact_lock(${id}) t`}`;
}

export interface KeyTurnRow {
  /** Always true when waiting; with `wait: false`, whether the lock was free. */
  taken: boolean;
  isolation: string;
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

export interface QueuedKeyRow {
  name: string;
  lock_key: string;
  /** Queued sagas of the key in this page. */
  queued: number;
  /** No saga of the key is active: the first queued one should be running. */
  orphan: boolean;
}

/**
 * The keys of a page of at most `scan` queued sagas, in key order after the cursor `after` (along
 * the lock index), each with whether no saga holds it: only when a holder's end could not start
 * the next one (no runtime there knew its version) or a holder row was deleted by hand. A pass
 * costs the same however long the queues are; the next goes on after the page's last key.
 */
export function selectQueuedKeys(scan: number, after: { name: string; key: string } | null) {
  return sql`
    WITH page AS (
      SELECT name, lock_key FROM skiplock.sagas
      WHERE status = 'queued' AND lock_key IS NOT NULL
        ${after ? sql`AND (name, lock_key) > (${after.name}, ${after.key})` : sql``}
      ORDER BY name, lock_key
      LIMIT ${scan})
    SELECT q.name, q.lock_key, count(*)::int AS queued,
           NOT EXISTS (
             SELECT 1 FROM skiplock.sagas a
             WHERE a.status IN ('running', 'waiting', 'compensating') AND a.name = q.name
               AND a.lock_key = q.lock_key) AS orphan
    FROM page q
    GROUP BY q.name, q.lock_key
    ORDER BY q.name, q.lock_key`;
}

export interface SagaKeyRow {
  status: SagaStatus;
  name: string;
  lock_key: string | null;
}

/** A saga's status, name and lock key, unlocked: what decides whether its key's turn comes first. */
export function selectSagaKey(id: string) {
  return sql`SELECT status, name, lock_key FROM skiplock.sagas WHERE id = ${id}`;
}

/**
 * Bounds every lock wait for the rest of the transaction (rows, the key turn's advisory lock) to
 * `waitMs`: a longer one fails with SQLSTATE 55P03 and the transaction changes nothing. Only for
 * a transaction of the runtime's own (an operator's action), never a caller's.
 */
export function setLockWait(waitMs: number) {
  return sql`SELECT set_config('lock_timeout', ${`${waitMs}ms`}, true)`;
}
