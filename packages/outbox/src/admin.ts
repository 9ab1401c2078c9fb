import type pg from 'pg';
import { runSql, withTransaction, type Queryable } from '@skiplock/queue/engine';
import {
  countMessages,
  countMessagesCapped,
  countPendingByTopic,
  killPending,
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

export interface TopicPending {
  topic: string;
  pending: number;
  /** Age of the topic's oldest pending message in ms. */
  oldestPendingMs: number;
  /** Its first pending message (lowest id), which an operator may kill, and that message's key. */
  oldestId: string;
  oldestKey: string | null;
}

export interface PendingByTopic {
  /** The topics with the oldest pending messages, oldest first, `limit` at most. */
  topics: TopicPending[];
  /** The other topics' pending messages summed, or null when every topic is shown. */
  others: { topics: number; pending: number; oldestPendingMs: number } | null;
  /**
   * True when `cap` pending messages were read: the counts are of the first `cap` due (lower
   * bounds), and a topic whose messages all wait out a backoff or are parked may be missing.
   */
  atLeast: boolean;
}

/**
 * Pending messages by topic, the topics with the oldest first: a topic no relay serves (its
 * messages, and the later ones of their keys on other topics, wait for ever) stands out by its
 * age. Reads the first `cap` pending messages due (default 10,000) through the claim's index,
 * as the dashboard's counts do, and shows `limit` topics (default 20, up to 1,000), the rest
 * summed in `others`.
 */
export async function pendingByTopic(
  db: Queryable,
  options: { limit?: number; cap?: number } = {},
): Promise<PendingByTopic> {
  const limit = options.limit ?? 20;
  const cap = options.cap ?? 10_000;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 1_000) {
    throw new TypeError(`pendingByTopic: limit must be an integer from 1 to 1,000, not ${limit}`);
  }
  if (!Number.isSafeInteger(cap) || cap < 1 || cap > 10_000_000) {
    throw new TypeError(`pendingByTopic: cap must be an integer from 1 to 10,000,000, not ${cap}`);
  }
  const { rows } = await runSql<{
    topic: string | null;
    pending: number;
    oldest_ms: number;
    oldest_id: string | null;
    oldest_key: string | null;
    topics: number;
    rank: number | null;
  }>(db, countPendingByTopic(cap, limit));
  const ms = (v: number) => Math.max(0, Math.round(Number(v)));
  // Oldest first, the first published first among those of one age (one transaction's).
  const shown = rows.filter((r) => r.topic !== null).sort((a, b) => a.rank! - b.rank!);
  const rest = rows.find((r) => r.topic === null);
  return {
    topics: shown.map((r) => ({
      topic: r.topic!,
      pending: r.pending,
      oldestPendingMs: ms(r.oldest_ms),
      oldestId: r.oldest_id!,
      oldestKey: r.oldest_key,
    })),
    others: rest
      ? { topics: rest.topics, pending: rest.pending, oldestPendingMs: ms(rest.oldest_ms) }
      : null,
    atLeast: rows.reduce((n, r) => n + r.pending, 0) >= cap,
  };
}

export interface KilledMessage {
  id: string;
  topic: string;
  key: string | null;
}

const MAX_REASON = 500;

/**
 * Sends pending messages to dead by an operator's word, with `last_error` "killed by an
 * operator: <reason>"; returns those it killed, in id order. For a message no relay will take:
 * one of a topic no relay serves, which holds back its key's later messages on every topic (key
 * order spans topics), or one its receiver will never accept. Its key goes on as after any dead
 * message (its next message, parked or held behind it, is freed). A message a relay holds now
 * (leased, the lease not run out) is not killed: it may be delivered yet, and killing it would
 * let its key's next go beside it; kill it once its attempt settled. `retryDeadMessages` sends a
 * killed message again. Up to 1,000 ids per call.
 */
export async function killPendingMessages(
  pool: pg.Pool,
  ids: readonly string[],
  options: { reason?: string } = {},
): Promise<KilledMessage[]> {
  if (ids.length > MAX_IDS) {
    throw new TypeError(`killPendingMessages: ${ids.length} ids, more than ${MAX_IDS} per call`);
  }
  for (const id of ids) checkId(id, 'killPendingMessages');
  const reason = options.reason;
  if (reason !== undefined && (typeof reason !== 'string' || reason.length > MAX_REASON)) {
    throw new TypeError(
      `killPendingMessages: reason must be a string of ${MAX_REASON} characters at most`,
    );
  }
  if (ids.length === 0) return [];
  const said = reason?.trim();
  const lastError = said ? `killed by an operator: ${said}` : 'killed by an operator';
  const { rows } = await runSql<KilledMessage>(pool, killPending(ids, lastError));
  return rows;
}
