import { sql } from 'drizzle-orm';

/** Publishers notify here; relays LISTEN on it and poll as well. */
export const OUTBOX_CHANNEL = 'skiplock_outbox';

/**
 * Inserts messages in the caller's transaction, in the given order (ids rise with it), and
 * notifies the relays once per statement; PostgreSQL delivers the notification only if the
 * transaction commits, and folds identical ones of one transaction into one.
 */
export function insertMessages(
  topics: string[],
  keys: (string | null)[],
  payloads: string[],
  headers: string[],
) {
  return sql`
    WITH ins AS (
      INSERT INTO skiplock.outbox_messages (topic, key, payload, headers)
      SELECT * FROM unnest(${sql.param(topics)}::text[], ${sql.param(keys)}::text[], ${sql.param(payloads)}::jsonb[], ${sql.param(headers)}::jsonb[])
      RETURNING id
    )
    SELECT (SELECT array_agg(id ORDER BY id) FROM ins)::text[] AS ids,
           pg_notify(${OUTBOX_CHANNEL}, '') IS NULL AS notified`;
}

export interface ClaimedRow {
  id: string;
  topic: string;
  key: string | null;
  payload: unknown;
  headers: Record<string, string>;
  attempts: number;
  created_at: Date;
}

/**
 * Takes up to `limit` deliverable messages under a new lease: pending, due, not leased (or whose
 * lease ran out: a relay died holding them), and first of their key. "First of its key" means no
 * earlier message of the key is pending at all, leased or waiting out a backoff, so a key never
 * has two messages in flight and a failing message holds back its own key only. One claim takes
 * at most one message per key for the same reason. SKIP LOCKED lets relays claim side by side.
 */
export function claimMessages(options: {
  limit: number;
  leaseId: string;
  leaseMs: number;
  relay: string;
  topics: readonly string[] | null;
}) {
  const topicFilter = options.topics
    ? sql`AND m.topic = ANY(${sql.param(options.topics)}::text[])`
    : sql``;
  return sql`
    WITH picked AS (
      SELECT m.id FROM skiplock.outbox_messages m
      WHERE m.status = 'pending'
        AND m.run_after <= now()
        AND (m.lease_until IS NULL OR m.lease_until < now())
        ${topicFilter}
        AND (m.key IS NULL OR NOT EXISTS (
          SELECT 1 FROM skiplock.outbox_messages e
          WHERE e.key = m.key AND e.status = 'pending' AND e.id < m.id))
      ORDER BY m.id
      LIMIT ${options.limit}
      FOR UPDATE SKIP LOCKED
    )
    UPDATE skiplock.outbox_messages m
    SET attempts = m.attempts + 1,
        lease_id = ${options.leaseId}::uuid,
        lease_until = now() + ${options.leaseMs}::int * interval '1 millisecond',
        locked_by = ${options.relay}
    FROM picked
    WHERE m.id = picked.id
    RETURNING m.id::text AS id, m.topic, m.key, m.payload, m.headers, m.attempts, m.created_at`;
}

/**
 * Settles a claimed batch in one statement: delivered, dead, or back to pending after its delay.
 * Fenced on the lease: a relay whose lease ran out and whose messages another relay claimed
 * changes nothing (the rows it no longer holds are missing from RETURNING).
 */
export function settleMessages(
  leaseId: string,
  outcome: {
    ids: string[];
    ok: boolean[];
    dead: boolean[];
    delayMs: number[];
    errors: (string | null)[];
  },
) {
  return sql`
    UPDATE skiplock.outbox_messages m
    SET status = (CASE WHEN f.ok THEN 'delivered' WHEN f.dead THEN 'dead' ELSE 'pending' END)::skiplock.outbox_status,
        settled_at = CASE WHEN f.ok OR f.dead THEN now() END,
        run_after = CASE WHEN f.ok OR f.dead THEN m.run_after
                         ELSE now() + f.delay_ms * interval '1 millisecond' END,
        last_error = f.error,
        lease_id = NULL,
        lease_until = NULL,
        locked_by = NULL
    FROM unnest(${sql.param(outcome.ids)}::bigint[], ${sql.param(outcome.ok)}::boolean[], ${sql.param(outcome.dead)}::boolean[],
                ${sql.param(outcome.delayMs)}::int[], ${sql.param(outcome.errors)}::text[]) AS f(id, ok, dead, delay_ms, error)
    WHERE m.id = f.id AND m.lease_id = ${leaseId}::uuid
    RETURNING m.id::text AS id`;
}

/** Deletes up to `limit` delivered messages settled before the cut-off, oldest first. */
export function deleteDelivered(olderThanMs: number, limit: number) {
  return sql`
    DELETE FROM skiplock.outbox_messages
    WHERE id IN (
      SELECT id FROM skiplock.outbox_messages
      WHERE status = 'delivered' AND settled_at < now() - ${olderThanMs}::bigint * interval '1 millisecond'
      ORDER BY settled_at
      LIMIT ${limit}
      FOR UPDATE SKIP LOCKED)`;
}

/** Messages by status, and the age of the oldest pending one. */
export function countMessages() {
  return sql`
    SELECT status::text AS status, count(*)::int AS count,
           extract(epoch FROM now() - min(created_at)) * 1000 AS oldest_ms
    FROM skiplock.outbox_messages GROUP BY status`;
}

export interface DeadRow {
  id: string;
  topic: string;
  key: string | null;
  attempts: number;
  last_error: string | null;
  created_at: Date;
  settled_at: Date;
}

/** Dead messages, newest first, keyset-paged by id. */
export function selectDead(limit: number, beforeId: string | null) {
  const page = beforeId === null ? sql`` : sql`AND id < ${beforeId}::bigint`;
  return sql`
    SELECT id::text AS id, topic, key, attempts, last_error, created_at, settled_at
    FROM skiplock.outbox_messages
    WHERE status = 'dead' ${page}
    ORDER BY id DESC
    LIMIT ${limit}`;
}

/**
 * Sends dead messages back to pending with a fresh attempt count. A retried message keeps its id,
 * so it takes its old place in its key's order: later messages of the key wait behind it again.
 */
export function retryDead(ids: readonly string[]) {
  return sql`
    UPDATE skiplock.outbox_messages
    SET status = 'pending', attempts = 0, run_after = now(), settled_at = NULL
    WHERE status = 'dead' AND id = ANY(${sql.param(ids)}::bigint[])
    RETURNING id::text AS id`;
}
