import { sql } from 'drizzle-orm';
import { commitItem } from '@skiplock/queue/engine';

/** Publishers notify here; relays LISTEN on it and poll as well. */
export const OUTBOX_CHANNEL = 'skiplock_outbox';

/** Advisory lock class of publishers' per-key locks: the queue's namespace (0x5c10c) + 2. */
export const PUBLISH_LOCK_CLASS = 377102;

/**
 * Inserts messages in the caller's transaction, in the given order (ids rise with it), and
 * notifies the relays once per statement; PostgreSQL delivers the notification only if the
 * transaction commits, and folds identical ones of one transaction into one.
 *
 * First it takes a transaction advisory lock per key (in lock-id order, so two statements never
 * deadlock each other; two transactions publishing keys in opposite orders over several
 * statements can, as the README says), held to commit. Ids come from a sequence at insert, not
 * at commit: without the lock, a transaction that inserted a key's message first but committed
 * second would make that message visible after a relay had already taken the key's later one,
 * and the key would have two in flight, out of order. With it, a key's ids rise in commit order. The locks sit in a
 * materialized CTE joined to the rows, so all are held before the first row draws its id.
 */
export function insertMessages(
  topics: string[],
  keys: (string | null)[],
  payloads: string[],
  headers: string[],
) {
  return sql`
    WITH locks AS MATERIALIZED (
      SELECT count(pg_advisory_xact_lock(${PUBLISH_LOCK_CLASS}, k.h)) AS n
      FROM (SELECT DISTINCT hashtext(key) AS h FROM unnest(${sql.param(keys)}::text[]) AS key
            WHERE key IS NOT NULL ORDER BY 1) AS k
    ),
    ins AS (
      INSERT INTO skiplock.outbox_messages (topic, key, payload, headers)
      SELECT m.topic, m.key, m.payload, m.headers
      FROM unnest(${sql.param(topics)}::text[], ${sql.param(keys)}::text[], ${sql.param(payloads)}::jsonb[], ${sql.param(headers)}::jsonb[])
             WITH ORDINALITY AS m(topic, key, payload, headers, ord)
      CROSS JOIN locks
      ORDER BY m.ord
      RETURNING id
    )
    SELECT (SELECT array_agg(id ORDER BY id) FROM ins)::text[] AS ids,
           pg_notify(${OUTBOX_CHANNEL}, '') IS NULL AS notified`;
}

/**
 * A key's followers a claim leaves unparked behind the message it takes: a short backlog is
 * stepped over, not parked and unparked (two row writes each); a longer one is parked past this.
 */
export const PARK_WINDOW = 8;

/**
 * Messages one claim parks at most, so that its work stays bounded, and so that the planner's
 * estimate of it does too: as a limit per key, it was costed as if each of the batch's 100 keys
 * had 1,000 to park, past `jit_above_cost`, and the claim was JIT-compiled (37 ms of its 56).
 */
export const PARK_LIMIT = 10_000;

/**
 * `alias`'s pending rows of `of`'s key, parked or not as `half` says, with ids between `after`
 * and `before` (SQL expressions; open ends when left out): one range of
 * outbox_messages_pending_key_idx, bounded on both ends by row comparisons on the index's
 * columns, read with `inIndexOrder`. Only that index
 * can take these as a range or give that order, so the plan does not hang on statistics that a
 * burst of parking makes stale. Written as `key = of.key AND id > of.id`, the planner walked the
 * primary key or the whole table, costing a probe as if a key's rows were spread evenly over
 * them, or sorted a bitmap of the whole parked half when its statistics said none was parked:
 * 200 messages into a drain of 20,000 over 10 keys, a probe read 19,794 rows, and the claim's
 * plan was dear enough to be JIT-compiled (590 ms of its 640, EXPLAIN ANALYZE).
 */
function ofKey(
  alias: string,
  of: string,
  half: 'parked' | 'unparked',
  {
    after = '0::bigint',
    before = '9223372036854775807::bigint',
  }: { after?: string; before?: string },
) {
  const row = `(${alias}.key, (${alias}.run_after = 'infinity'::timestamptz), ${alias}.id)`;
  const at = (id: string) => `(${of}.key, ${String(half === 'parked')}, ${id})`;
  return sql.raw(
    `${alias}.status = 'pending' AND ${alias}.key IS NOT NULL AND ${row} > ${at(after)} AND ${row} < ${at(before)}`,
  );
}

/**
 * outbox_messages_pending_key_idx's order, or its reverse (`desc`). A look for a message before
 * another reads down from it: the nearest comes first, and the dead entries of the key's
 * delivered messages, low in the range until vacuum removes them, are read only when there is
 * none (a key's first message). Read up, every look stepped over all of them: a claim late in a
 * drain of 20,000 over 10 keys read 1,000 a look, 80 looks a claim.
 */
const inIndexOrder = (alias: string, desc = false) => {
  const dir = desc ? ' DESC' : '';
  return sql.raw(
    `ORDER BY ${alias}.key${dir}, (${alias}.run_after = 'infinity'::timestamptz)${dir}, ${alias}.id${dir}`,
  );
};

/**
 * True when `of`'s key has no pending message in that half on that side of it. `OFFSET 0` keeps
 * the planner from dropping the subquery's order (it drops ORDER BY and LIMIT from an EXISTS
 * otherwise) and from turning it into a join; as a `NOT EXISTS` the planner guesses that half the
 * candidates pass it, so the claim still reads pending rows in due order and stops at its limit.
 * Written as `(SELECT ...) IS NULL`, it guessed 0.5 % would, and sorted all of them first: 200 ms
 * a claim of 20,000 messages over 1,000 keys, against 3 ms.
 */
const noneOfKey = (
  of: string,
  half: 'parked' | 'unparked',
  range: { after?: string; before?: string },
) => {
  const e = `${of}_${half}`;
  // Nearest first: down from a `before`, up from an `after`.
  const desc = range.before !== undefined && range.after === undefined;
  return sql`NOT EXISTS (SELECT 1 FROM skiplock.outbox_messages ${sql.raw(e)}
    WHERE ${ofKey(e, of, half, range)} ${inIndexOrder(e, desc)} LIMIT 1 OFFSET 0)`;
};

/**
 * True while no message at all is parked: one look at the end of the claim's index, evaluated
 * once per statement, which spares the per-message looks at the parked half that only parking
 * makes necessary (those cost a claim over 1,000 keys with nothing parked 15 % of its relay
 * pass: 12,427 messages/s against 14,802, medians of 3).
 */
const nothingParked = sql.raw(`NOT EXISTS (
  SELECT 1 FROM skiplock.outbox_messages a WHERE a.status = 'pending' AND a.run_after = 'infinity')`);

/**
 * Unparks the key's next message after each row of `ended` (a CTE of rows that just left
 * pending, with `id` and `key`): its first parked follower, when no unparked one comes before it.
 * Its due time becomes its publish time, so it is not put behind what was published after it.
 * The rows are updated by id through the primary key: joined, the planner may hash them against
 * a scan of the whole table, delivered rows and all. While nothing is parked at all (claims that
 * fill their batch park nothing), `nothingParked` says so, instead of a probe per message settled.
 */
const unparkNext = (ended: string) => sql`
    UPDATE skiplock.outbox_messages f
    SET run_after = f.created_at
    WHERE f.id = ANY(ARRAY(
      SELECT n.id FROM ${sql.raw(ended)} x
      CROSS JOIN LATERAL (
        SELECT n.id FROM skiplock.outbox_messages n
        WHERE ${ofKey('n', 'x', 'parked', { after: 'x.id' })} ${inIndexOrder('n')} LIMIT 1) n
      WHERE x.key IS NOT NULL AND ${noneOfKey('x', 'unparked', { after: 'x.id', before: 'n.id' })}
        AND NOT ${nothingParked}))`;

/**
 * Frees the followers held behind each row of `ended` (a CTE of rows that just left pending, with
 * `id`, `key` and `run_after`): a head sent dead while it waited out a backoff had pushed its
 * key's unparked followers to its due time (settleMessages' held), so they are due now, or the key
 * waited out a backoff no message of it still has (found by an audit: an hour, after a 503 with
 * Retry-After 3600). By id, driven from the ended rows: joined, with statistics from before
 * parking, the planner read the claim's index from now() on, every parked row included, on each
 * pass (20 ms with 19,906 parked and nothing expired; found in review).
 */
const freeHeld = (ended: string) => sql`
      UPDATE skiplock.outbox_messages f
      SET run_after = now()
      WHERE f.id = ANY(ARRAY(
        SELECT w.id FROM ${sql.raw(ended)} x
        CROSS JOIN LATERAL (
          SELECT w.id, w.run_after FROM skiplock.outbox_messages w
          WHERE ${ofKey('w', 'x', 'unparked', { after: 'x.id' })}) w
        WHERE x.key IS NOT NULL AND w.run_after > now() AND w.run_after <= x.run_after))`;

/**
 * A relay's fixed integer settings written into its statements, not sent as parameters: the
 * planner can then plan them once. With `LIMIT $n` it guessed a tenth of the table and chose a
 * plan four times as slow (12.5 ms a claim against 3.5, the generic plan forced), so every claim
 * was planned again: 0.2 ms of planning for the claim before parking, 0.5 for this one.
 */
function literal(n: number) {
  if (!Number.isSafeInteger(n)) throw new TypeError(`expected an integer, got ${String(n)}`);
  return sql.raw(String(n));
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
 * Both halves of the key are looked at: a parked message always has an unparked one of its key
 * below it while every relay parks and unparks, but a relay of an earlier version unparks nothing
 * (found in review: mixed with one, a key's parked messages were left with nothing below them,
 * and a message published after them was claimed first). Looked at, such a key stalls instead.
 */
export function claimMessages(options: {
  limit: number;
  leaseId: string;
  leaseMs: number;
  relay: string;
  topics: readonly string[] | null;
  /** A message with this many attempts started is not claimed again (see `expireLastAttempts`). */
  maxAttempts: number;
  /** Commit without waiting for the WAL flush (see `RelayOptions.asyncCommit`). */
  asyncCommit: boolean;
}) {
  const topicFilter = options.topics
    ? sql`AND m.topic = ANY(${sql.param(options.topics)}::text[])`
    : sql``;
  return sql`
    WITH picked AS (
      SELECT m.id, m.key FROM skiplock.outbox_messages m
      WHERE m.status = 'pending'
        AND m.run_after <= now()
        AND (m.lease_until IS NULL OR m.lease_until < now())
        AND m.attempts < ${literal(options.maxAttempts)}
        ${topicFilter}
        AND (m.key IS NULL OR (${noneOfKey('m', 'unparked', { before: 'm.id' })}
          AND (${nothingParked} OR ${noneOfKey('m', 'parked', { before: 'm.id' })})))
      ORDER BY m.run_after, m.id
      LIMIT ${literal(options.limit)}
      FOR UPDATE SKIP LOCKED
    ),
    claimed AS (
      UPDATE skiplock.outbox_messages m
      SET attempts = m.attempts + 1,
          lease_id = ${options.leaseId}::uuid,
          lease_until = now() + ${options.leaseMs}::int * interval '1 millisecond',
          locked_by = ${options.relay}
      FROM picked, ${commitItem(options.asyncCommit)}
      WHERE m.id = picked.id
      RETURNING m.id::text AS id, m.topic, m.key, m.payload, m.headers, m.attempts, m.created_at
    ),
    -- A claim that did not fill its batch read every due pending row; those it stepped over are
    -- followers of keys whose first message is in flight. It parks the followers of the keys it
    -- takes past the window, so the next claims do not read them again. Only the claim that took
    -- a key's first message parks that key's followers, and no settle of it can run meanwhile:
    -- the settle that ends it (which unparks the next) sees every follower this parked. A filled
    -- claim parks nothing (the InitPlan is false): it stopped at its limit, not at the backlog.
    -- A key's pending messages lie as the window (unparked), the parked ones, then those
    -- published since (unparked): with a parked one (z), only those after the last are read, not
    -- the dead entries parking left below it (a bitmap of them cost 7 ms a claim late in a drain
    -- of 20,000 over 10 keys); without, those past the window.
    parked AS (
      UPDATE skiplock.outbox_messages f
      SET run_after = 'infinity'
      WHERE f.id = ANY(ARRAY(
        SELECT b.id FROM picked p
        LEFT JOIN LATERAL (
          SELECT z.id AS last FROM skiplock.outbox_messages z
          WHERE ${ofKey('z', 'p', 'parked', { after: 'p.id' })} ${inIndexOrder('z', true)}
          LIMIT 1) z ON true
        CROSS JOIN LATERAL (
          SELECT w.id FROM skiplock.outbox_messages w
          WHERE ${ofKey('w', 'p', 'unparked', { after: 'coalesce(z.last, p.id)' })} ${inIndexOrder('w')}
          OFFSET CASE WHEN z.last IS NULL THEN ${literal(PARK_WINDOW)} ELSE 0 END) b
        WHERE p.key IS NOT NULL AND (SELECT count(*) FROM picked) < ${literal(options.limit)}
        LIMIT ${literal(PARK_LIMIT)}))
    )
    SELECT * FROM claimed`;
}

/**
 * Settles a claimed batch in one statement: delivered, dead, or back to pending after its delay.
 * Fenced on the lease: a relay whose lease ran out and whose messages another relay claimed
 * changes nothing (the rows it no longer holds are missing from RETURNING). A message that
 * `expireLastAttempts` sent dead keeps its lease for a late delivered settle only: a failed one
 * would bring it back to pending past the revive's key checks, beside its key's next message
 * (found in review).
 */
export function settleMessages(
  leaseId: string,
  asyncCommit: boolean,
  outcome: {
    ids: string[];
    ok: boolean[];
    dead: boolean[];
    /** Never sent by the sink: the attempt the claim counted is given back. */
    unsent: boolean[];
    delayMs: number[];
    errors: (string | null)[];
  },
) {
  return sql`
    WITH settled AS (
    UPDATE skiplock.outbox_messages m
    SET attempts = CASE WHEN f.unsent THEN m.attempts - 1 ELSE m.attempts END,
        status = (CASE WHEN f.ok THEN 'delivered' WHEN f.dead THEN 'dead' ELSE 'pending' END)::skiplock.outbox_status,
        settled_at = CASE WHEN f.ok OR f.dead THEN now() END,
        run_after = CASE WHEN f.ok OR f.dead THEN m.run_after
                         ELSE now() + f.delay_ms * interval '1 millisecond' END,
        last_error = f.error,
        lease_id = NULL,
        lease_until = NULL,
        locked_by = NULL
    FROM unnest(${sql.param(outcome.ids)}::bigint[], ${sql.param(outcome.ok)}::boolean[], ${sql.param(outcome.dead)}::boolean[],
                ${sql.param(outcome.unsent)}::boolean[], ${sql.param(outcome.delayMs)}::int[], ${sql.param(outcome.errors)}::text[])
         AS f(id, ok, dead, unsent, delay_ms, error), ${commitItem(asyncCommit)}
    WHERE m.id = f.id AND m.lease_id = ${leaseId}::uuid AND (m.status = 'pending' OR f.ok)
    RETURNING m.id, m.key, m.status, m.run_after
    ),
    -- A key whose head waits out a backoff holds its followers back anyway: give the unparked
    -- ones the head's due time, so claims (which read pending rows in due-time order) stop
    -- before them instead of stepping over each one. Once per failed attempt, proportional to
    -- the key's unparked followers (the claim parked the rest).
    held AS (
      UPDATE skiplock.outbox_messages f
      SET run_after = s.run_after
      FROM settled s
      WHERE s.status = 'pending' AND s.key IS NOT NULL
        AND ${ofKey('f', 's', 'unparked', { after: 's.id' })} AND f.run_after < s.run_after
    ),
    ended AS (SELECT id, key FROM settled WHERE status <> 'pending'),
    unparked AS (${unparkNext('ended')})
    SELECT count(*)::int AS settled FROM settled`;
}

/**
 * `settleMessages` for a batch the sink delivered whole, the usual case: one array instead of six
 * and no backoff bookkeeping. Fenced on the lease as that one.
 */
export function settleDelivered(leaseId: string, asyncCommit: boolean, ids: string[]) {
  return sql`
    WITH settled AS (
      UPDATE skiplock.outbox_messages m
      SET status = 'delivered', settled_at = now(), last_error = NULL,
          lease_id = NULL, lease_until = NULL, locked_by = NULL
      FROM unnest(${sql.param(ids)}::bigint[]) AS f(id), ${commitItem(asyncCommit)}
      WHERE m.id = f.id AND m.lease_id = ${leaseId}::uuid
      RETURNING m.id, m.key
    ),
    unparked AS (${unparkNext('settled')})
    SELECT count(*)::int AS settled FROM settled`;
}

/**
 * Sends to dead the messages of `topics` (all, when null) that are out of attempts and not
 * leased: those whose last attempt's lease ran out (the relay died or hung while delivering them:
 * a message that crashes its relay every time would otherwise crash-loop the relays and hold its
 * key for good; or a claim's answer was lost, the message never sent, or every settle failed), and those that failed their last attempt under a relay allowed more of them
 * (`maxAttempts` lowered since), which no claim takes again and which held their key for good
 * (found in review). Each relay expires its own topics only, by its own `maxAttempts`: another
 * relay's messages may have attempts left under that relay's setting.
 *
 * It keeps `lease_id`: a relay that delivered the message but settles after its lease ran out
 * (its settle stalled behind a busy pool or server) still settles it, fenced on that lease, and
 * the message is `delivered`, as it was, not dead (found in review). No claim takes a dead
 * message, so no other lease can be in between; a revive clears the lease.
 */
export function expireLastAttempts(
  maxAttempts: number,
  limit: number,
  topics: readonly string[] | null,
) {
  const topicFilter = topics ? sql`AND topic = ANY(${sql.param(topics)}::text[])` : sql``;
  return sql`
    WITH expired AS (
    UPDATE skiplock.outbox_messages m
    SET status = 'dead', settled_at = now(), lease_until = NULL, locked_by = NULL,
        last_error = CASE WHEN m.lease_until IS NULL
          THEN format('out of attempts: %s started, maxAttempts %s; last error: %s',
                      m.attempts, ${maxAttempts}::int, coalesce(m.last_error, 'none'))
          ELSE 'its last attempt''s lease ran out unsettled: the relay died or hung, or lost its claim''s answer (the message may never have been sent) or every try of its settle' END
    FROM (
      SELECT id, lease_until IS NOT NULL AS lease_ran_out FROM skiplock.outbox_messages
      WHERE status = 'pending' AND attempts >= ${maxAttempts}
        AND (lease_until IS NULL OR lease_until < now()) ${topicFilter}
      ORDER BY id
      LIMIT ${limit}
      FOR UPDATE SKIP LOCKED) e
    WHERE m.id = e.id
    RETURNING m.id, m.key, m.run_after, e.lease_ran_out
    ),
    freed AS (${freeHeld('expired')}),
    -- Its next message, if parked, is its key's first now (the rows freed above are unparked,
    -- so it is unparked only when none of them comes before it).
    unparked AS (${unparkNext('expired')})
    SELECT id::text AS id, lease_ran_out FROM expired`;
}

/** Parked messages one maintenance pass reads when it looks for stalled keys. */
export const UNSTALL_PAGE = 10_000;

/**
 * Unparks the first parked message of every key that has parked messages and no unparked pending
 * one before them: nothing of the key is in flight or waiting, so no settle will ever unpark it,
 * and the claim, which looks at both halves, holds the key back for good. A relay of an earlier
 * version leaves a key so when it delivers the key's first message (it neither unparks nor sees
 * parked messages), as does a rollback; this version's own statements never do. Reads one page of
 * the parked messages, in id order after `after` (the claim's index: parked ones lie at its
 * end), and looks at each key of the page once, two probes of the per-key index. Unparking too
 * much costs only parking again: the claim, not parking, keeps a key's order. The update finds
 * its rows by id and checks they are still parked with `isfinite`, which no index answers:
 * written `run_after = 'infinity'`, the planner read every parked row of the claim's index
 * instead (10,000 for 6 heads, 4.6 ms of the statement's 13.6).
 */
export function unparkStalledKeys(after: string, limit: number) {
  return sql`
    WITH page AS (
      SELECT p.id, p.key FROM skiplock.outbox_messages p
      WHERE p.status = 'pending' AND p.run_after = 'infinity'::timestamptz
        AND p.id > ${after}::bigint
      ORDER BY p.run_after, p.id
      LIMIT ${literal(limit)}
    ),
    heads AS (
      SELECT f.id FROM (SELECT DISTINCT key FROM page WHERE key IS NOT NULL) k
      CROSS JOIN LATERAL (
        SELECT n.id FROM skiplock.outbox_messages n
        WHERE ${ofKey('n', 'k', 'parked', {})} ${inIndexOrder('n')} LIMIT 1) f
      WHERE ${noneOfKey('k', 'unparked', { before: 'f.id' })}
    ),
    unstalled AS (
      UPDATE skiplock.outbox_messages u
      SET run_after = u.created_at
      WHERE u.id = ANY(ARRAY(SELECT id FROM heads))
        AND u.status = 'pending' AND NOT isfinite(u.run_after)
      RETURNING u.id
    )
    SELECT (SELECT max(id) FROM page)::text AS last,
           (SELECT count(*) FROM page)::int AS read,
           (SELECT count(*) FROM unstalled)::int AS unstalled`;
}

/**
 * Deletes up to `limit` delivered messages settled before the cut-off, oldest first, whatever
 * their topic: relays sharing the table share its retention, the shortest `retainDeliveredMs`
 * winning. Scoping it to a relay's topics would filter after the settled index, so a relay with
 * a short retention would step over every other topic's rows it keeps, on every pass.
 */
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

/**
 * Messages by status counted up to `cap` each (a count of `cap + 1` means "more"), through the
 * pending and settled partial indexes, so a table of millions of delivered rows costs a page that
 * refreshes every few seconds at most `cap` index entries per status. The oldest pending message
 * is sought among the first `cap + 1` due ones (pending index order), for the same reason.
 */
export function countMessagesCapped(cap: number) {
  // The status a literal, not a parameter: only a constant lets the planner use a partial index.
  // Ordered as the index is, so the plan is an index scan that stops at the cap: a bitmap scan
  // reads every entry of the status first, and a sequential scan may read the whole table
  // before it finds cap + 1 of a rare status.
  const upTo = (status: 'pending' | 'delivered' | 'dead') => {
    const order =
      status === 'pending'
        ? sql`run_after, id`
        : status === 'dead'
          ? sql`id`
          : sql`status, settled_at`;
    return sql`(SELECT count(*)::int FROM (
      SELECT 1 FROM skiplock.outbox_messages
      WHERE status = ${sql.raw(`'${status}'`)} ORDER BY ${order} LIMIT ${cap + 1}) s)`;
  };
  return sql`
    SELECT ${upTo('pending')} AS pending, ${upTo('delivered')} AS delivered, ${upTo('dead')} AS dead,
      (SELECT extract(epoch FROM now() - min(created_at)) * 1000 FROM (
         SELECT created_at FROM skiplock.outbox_messages WHERE status = 'pending'
         ORDER BY run_after, id LIMIT ${cap + 1}) p) AS oldest_ms`;
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

/**
 * Dead messages, newest first, keyset-paged by id: a range of `outbox_messages_dead_idx`. ORDER
 * BY names the table's column: a bare `id` is the select list's `id::text`, which put 999 before
 * 1000, and a keyset page after it then skipped messages.
 */
export function selectDead(limit: number, beforeId: string | null) {
  const page = beforeId === null ? sql`` : sql`AND outbox_messages.id < ${beforeId}::bigint`;
  return sql`
    SELECT id::text AS id, topic, key, attempts, last_error, created_at, settled_at
    FROM skiplock.outbox_messages
    WHERE status = 'dead' ${page}
    ORDER BY outbox_messages.id DESC
    LIMIT ${limit}`;
}

/**
 * Tries the publishers' transaction lock of each key of these dead messages (`insertMessages`'
 * locks, in the same lock-id order) and returns the keys' lock ids it holds, to commit: no
 * message of those keys commits until the revive does, and the revive's next statement, with a
 * fresh snapshot, sees every message of them that committed before. It never waits: a key whose
 * publisher is in a transaction is not taken, and its dead messages stay dead this time, rather
 * than stall that key's and the other keys' publishers behind a business transaction, or
 * deadlock with one that publishes keys in two statements.
 */
export function lockKeysOfDead(ids: readonly string[]) {
  return sql`
    SELECT coalesce(array_agg(k.h), '{}') AS locked
    FROM (SELECT DISTINCT hashtext(d.key) AS h FROM skiplock.outbox_messages d
          WHERE d.id = ANY(${sql.param(ids)}::bigint[]) AND d.status = 'dead' AND d.key IS NOT NULL
          ORDER BY 1) AS k
    WHERE pg_try_advisory_xact_lock(${PUBLISH_LOCK_CLASS}, k.h)`;
}

/**
 * Sends dead messages back to pending with a fresh attempt count and no lease (a late settle of
 * the attempt that expired no longer applies). A retried message keeps its id.
 * One whose key has any pending message (in flight or waiting out a backoff) stays dead: a claim
 * that took its snapshot before the revive committed still sees it dead, so it could take the
 * key's later pending message as the first of its key while the revived one went to another
 * relay, two of the key in flight (found in review: a claim that took a second over a backlog,
 * a revive during it). So does one whose key's publish lock `lockKeysOfDead` did not get
 * (`locked`: the lock ids it holds). Revived while its key has nothing pending, under that lock,
 * the revived messages are their key's only pending ones.
 */
export function retryDead(ids: readonly string[], locked: readonly number[]) {
  return sql`
    UPDATE skiplock.outbox_messages d
    SET status = 'pending', attempts = 0, run_after = now(), settled_at = NULL, lease_id = NULL
    WHERE d.status = 'dead' AND d.id = ANY(${sql.param(ids)}::bigint[])
      AND (d.key IS NULL OR (
        hashtext(d.key) = ANY(${sql.param(locked)}::int[])
        AND NOT EXISTS (
          SELECT 1 FROM skiplock.outbox_messages e
          WHERE e.key = d.key AND e.status = 'pending')))
    RETURNING d.id::text AS id`;
}

/**
 * Sends to dead, by an operator's word, the pending messages among `ids` that no relay holds:
 * never leased, or whose lease ran out (the relay died or hung: a claim may take it again
 * anyway). A leased one is left as it is: its relay is delivering it, and its settle, fenced on
 * the lease, marks it delivered whatever its status, so killed it could be delivered after all,
 * and the key's next message, unparked here, would be in flight beside it, out of order.
 * Then the key goes on as on the relay's own dead path: its followers held behind a killed head
 * that waited out a backoff are freed, and its next message, if parked, unparked. A message
 * killed while parked held no follower back (its run_after is `infinity`), so it frees none.
 * Killing one in the middle of its key's backlog may unpark the next: that costs only parking
 * again (the claim, not parking, keeps a key's order). The lease id is kept, as
 * `expireLastAttempts` keeps it: a late settle of the attempt whose lease ran out lands only if
 * it delivered, which is then the truth.
 */
export function killPending(ids: readonly string[], lastError: string) {
  return sql`
    WITH killed AS (
      UPDATE skiplock.outbox_messages m
      SET status = 'dead', settled_at = now(), lease_until = NULL, locked_by = NULL,
          last_error = ${lastError}
      WHERE m.id = ANY(${sql.param(ids)}::bigint[]) AND m.status = 'pending'
        AND (m.lease_until IS NULL OR m.lease_until < now())
      RETURNING m.id, m.topic, m.key, m.run_after
    ),
    heads AS (SELECT id, key, run_after FROM killed WHERE isfinite(run_after)),
    freed AS (${freeHeld('heads')}),
    unparked AS (${unparkNext('killed')})
    SELECT k.id::text AS id, k.topic, k.key FROM killed k ORDER BY k.id`;
}

/**
 * Pending messages by topic among the first `cap` due ones (the claim's index order, as
 * `countMessagesCapped` reads them): how many, the age of the oldest, and its id and key, for
 * the `shown` topics with the oldest messages; the rest summed in one row whose topic is null.
 * A topic no relay serves, or a key it holds back, has messages due since they were published,
 * so they sort first and are among those read whatever the cap; messages parked behind their key
 * (`run_after` infinity) sort last, and are left out first.
 * Plan (EXPLAIN ANALYZE, 100,000 rows: 70,000 delivered, 30,000 pending over 40 topics, cap
 * 10,000, 20 shown): a Limit over an Index Scan using outbox_messages_pending_idx that stops at
 * 10,000 rows, a HashAggregate of them by topic, a Sort and WindowAgg of the 39 topics read, and
 * the oldest message's key read by the primary key for each topic shown; 2.9 ms. Without the
 * ORDER BY, the same read was a Seq Scan of the table until 10,000 pending rows turned up. No topic index: a
 * count of every pending row by topic would read them all, as a page that refreshes should not.
 */
export function countPendingByTopic(cap: number, shown: number) {
  return sql`
    WITH due AS (
      SELECT topic, id, created_at FROM skiplock.outbox_messages
      WHERE status = 'pending' ORDER BY run_after, id LIMIT ${literal(cap)}
    ),
    topics AS (
      SELECT topic, count(*)::int AS pending, min(created_at) AS oldest, min(id) AS oldest_id,
             row_number() OVER (ORDER BY min(created_at), min(id)) AS rank
      FROM due GROUP BY topic
    ),
    shown AS (SELECT * FROM topics WHERE rank <= ${literal(shown)})
    SELECT s.topic, s.pending, extract(epoch FROM now() - s.oldest) * 1000 AS oldest_ms,
           s.oldest_id::text AS oldest_id, o.key AS oldest_key, 1 AS topics, s.rank::int AS rank
    FROM shown s JOIN skiplock.outbox_messages o ON o.id = s.oldest_id
    UNION ALL
    SELECT NULL, sum(pending)::int, extract(epoch FROM now() - min(oldest)) * 1000, NULL, NULL,
           count(*)::int, NULL
    FROM topics WHERE rank > ${literal(shown)} HAVING count(*) > 0`;
}
