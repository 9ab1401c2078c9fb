import type pg from 'pg';
import { runSql, withTransaction, type Queryable } from '@skiplock/queue/engine';
import {
  countMessages,
  countMessagesCapped,
  lockKeysOfDead,
  retryDead,
  selectDead,
  type DeadRow,
} from './sql/messages.js';

const MAX_IDS = 1_000;
const BIGINT_MAX = 9_223_372_036_854_775_807n;

function checkId(id: unknown, what: string): string {
  // Said apart: a number's text looks like an id, and the error read as if 213 were unknown.
  if (typeof id !== 'string') {
    throw new TypeError(
      `${what}: a message id must be a string, not the ${typeof id} ${String(id)}`,
    );
  }
  if (!/^[1-9][0-9]{0,18}$/.test(id) || BigInt(id) > BIGINT_MAX) {
    throw new TypeError(`${what}: "${String(id)}" is not a message id`);
  }
  return id;
}

type CountedStatus = 'pending' | 'delivered' | 'dead';

export interface OutboxCounts {
  pending: number;
  delivered: number;
  dead: number;
  /**
   * Age of the oldest pending message in ms, or null when none is pending. With `pending` in
   * `atLeast`, a lower bound: the oldest of the first `cap` due.
   */
  oldestPendingMs: number | null;
  /**
   * The statuses whose count reached the `cap` given to `outboxCounts`: their count is a lower
   * bound (and the oldest pending message the oldest among the first `cap` due). Empty without a
   * cap.
   */
  atLeast: CountedStatus[];
}

/**
 * Messages by status: what an operator checks first when events seem late. Without `cap` every
 * row is counted (a scan of the table: for a command run now and then); with one, each status is
 * counted up to `cap` through its index, for a page that refreshes (the dashboard's, 10,000).
 */
export async function outboxCounts(
  db: Queryable,
  options: { cap?: number } = {},
): Promise<OutboxCounts> {
  if (options.cap !== undefined) {
    const cap = options.cap;
    if (!Number.isSafeInteger(cap) || cap < 1 || cap > 10_000_000) {
      throw new TypeError(`outboxCounts: cap must be an integer from 1 to 10,000,000, not ${cap}`);
    }
    const { rows } = await runSql<Record<CountedStatus, number> & { oldest_ms: number | null }>(
      db,
      countMessagesCapped(cap),
    );
    const row = rows[0]!;
    const statuses: CountedStatus[] = ['pending', 'delivered', 'dead'];
    return {
      pending: Math.min(row.pending, cap),
      delivered: Math.min(row.delivered, cap),
      dead: Math.min(row.dead, cap),
      oldestPendingMs: row.oldest_ms === null ? null : Math.round(Number(row.oldest_ms)),
      atLeast: statuses.filter((s) => row[s] > cap),
    };
  }
  const { rows } = await runSql<{ status: string; count: number; oldest_ms: number | null }>(
    db,
    countMessages(),
  );
  const counts: OutboxCounts = {
    pending: 0,
    delivered: 0,
    dead: 0,
    oldestPendingMs: null,
    atLeast: [],
  };
  for (const row of rows) {
    if (row.status === 'pending' || row.status === 'delivered' || row.status === 'dead') {
      counts[row.status] = row.count;
    }
    if (row.status === 'pending' && row.oldest_ms !== null)
      counts.oldestPendingMs = Math.round(Number(row.oldest_ms));
  }
  return counts;
}

export interface DeadMessage {
  id: string;
  topic: string;
  key: string | null;
  attempts: number;
  lastError: string | null;
  createdAt: Date;
  deadAt: Date;
}

/** Dead messages, newest first; pass the last id of a page as `beforeId` for the next. */
export async function deadMessages(
  db: Queryable,
  options: { limit?: number; beforeId?: string } = {},
): Promise<DeadMessage[]> {
  const asked = options.limit ?? 50;
  // NaN would pass the clamps below and reach PostgreSQL as LIMIT NaN.
  if (typeof asked !== 'number' || Number.isNaN(asked)) {
    throw new TypeError(`deadMessages: limit must be a number (1 to 1,000), not ${String(asked)}`);
  }
  const limit = Math.min(Math.max(1, Math.floor(asked)), 1_000);
  const before = options.beforeId === undefined ? null : checkId(options.beforeId, 'deadMessages');
  const { rows } = await runSql<DeadRow>(db, selectDead(limit, before));
  return rows.map((r) => ({
    id: r.id,
    topic: r.topic,
    key: r.key,
    attempts: r.attempts,
    lastError: r.last_error,
    createdAt: r.created_at,
    deadAt: r.settled_at,
  }));
}

/**
 * Sends dead messages back for delivery with fresh attempts; returns the ids it revived. A dead
 * message whose key has a pending message (in flight, or waiting out a backoff) stays dead
 * (reviving it could put two of the key in flight), and so does one whose key a publisher's
 * transaction holds right now; call again once those settled. Publishers of the revived keys
 * wait for the revive to commit (one statement). Up to 1,000 ids per call.
 */
export async function retryDeadMessages(pool: pg.Pool, ids: readonly string[]): Promise<string[]> {
  if (ids.length > MAX_IDS) {
    throw new TypeError(`retryDeadMessages: ${ids.length} ids, more than ${MAX_IDS} per call`);
  }
  for (const id of ids) checkId(id, 'retryDeadMessages');
  if (ids.length === 0) return [];
  return withTransaction(pool, async (tx) => {
    // First hold the keys' publishers back, so the revive's snapshot is the keys' last word.
    const { rows: held } = await runSql<{ locked: number[] }>(tx, lockKeysOfDead(ids));
    const { rows } = await runSql<{ id: string }>(tx, retryDead(ids, held[0]?.locked ?? []));
    return rows.map((r) => r.id);
  });
}
