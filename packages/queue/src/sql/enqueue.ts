import type { Statement } from '../db.js';
import { statementName } from '../statement-name.js';

export interface JobRow {
  queue: string;
  jobType: string;
  /** Serialized JSON, already validated and size-checked. */
  payloadJson: string;
  idempotencyKey: string | null;
  priority: number;
  runAt: Date | null;
  delayMs: number | null;
  maxAttempts: number;
  timeoutMs: number | null;
  leaseMs: number;
  /** With a key, the job is inserted `waiting` for a slot of it (see skiplock.admit). */
  concurrencyKey: string | null;
  concurrencyLimit: number | null;
  /** Starts of the concurrency key per interval (with a key only). */
  rateLimit: number | null;
  rateIntervalMs: number | null;
  /** At most one queued job per (queue, key): keep it, or replace its payload and run time. */
  singleton: { key: string; mode: 'keep' | 'replace'; running: boolean } | null;
  /**
   * The enqueue's span context (W3C `traceparent` / `tracestate`), or null when none was recorded.
   * A bulk statement stores its first row's on every job: one producer span covers the bulk.
   */
  traceParent: string | null;
  traceState: string | null;
}

/** The columns every job of one bulk shares when no item carries options of its own. */
export type SharedColumns = Omit<
  JobRow,
  | 'payloadJson'
  | 'idempotencyKey'
  | 'concurrencyKey'
  | 'concurrencyLimit'
  | 'rateLimit'
  | 'rateIntervalMs'
  | 'singleton'
>;

export interface InsertedRow {
  id: string;
  inserted: boolean;
}

// Every statement here has constant text and travels with a name, so a connection parses and
// plans it once and then only binds and executes it. On a one-row insert, parse and plan cost more
// than the insert itself. The `_vN` suffix changes whenever a text changes: a name is bound to its
// text for the life of the connection.

/** A job's run time: the given time, else now plus the given delay (ms), else now. */
const runAtOf = (at: string, delayMs: string) =>
  `coalesce(${at}, now() + coalesce(${delayMs}, 0) * interval '1 millisecond')`;

const RUN_AT = runAtOf('$6::timestamptz', '$7::bigint');

/** A job with a concurrency key starts out waiting for a slot; skiplock.admit() makes it pending. */
const statusFor = (key: string) =>
  `CASE WHEN ${key} IS NULL THEN 'pending' ELSE 'waiting' END::skiplock.job_status`;

// Wake-ups: each statement that inserts jobs wakes who must act on them (no trigger: see migration
// 0016): the queues of the due pending jobs it wrote on `skiplock_jobs`, and the concurrency keys
// of the due waiting ones on `skiplock_admit` (or `*` for more than 16 keys), so an admitter gives
// them their slots at once. Nothing for a job scheduled later or inserted already leased.
// PostgreSQL sends notifications at commit and folds identical ones of a transaction, so a bulk of
// 10,000 jobs into one queue is one notification. The statements return the calls' result as a
// column `_wake`, only so that they are made; it means nothing.

/** A row a worker may claim now, and one an admitter may give a slot now. */
const DUE_PENDING = `status IN ('pending', 'retryable') AND run_at <= now()`;
const DUE_WAITING = `status = 'waiting' AND run_at <= now()`;

/** Over `rows` (queue, status, run_at, concurrency_key): one `pg_notify` per queue or key to wake. */
const wakeFor = (rows: string) => `(SELECT count(pg_notify(channel, payload)) FROM (
     SELECT DISTINCT 'skiplock_jobs' AS channel, queue AS payload FROM ${rows} WHERE ${DUE_PENDING}
     UNION ALL
     SELECT 'skiplock_admit', CASE WHEN count(*) OVER () > 16 THEN '*' ELSE concurrency_key END
     FROM (SELECT DISTINCT concurrency_key FROM ${rows} WHERE ${DUE_WAITING} LIMIT 17) waiting
   ) wake)`;

/** For one returned row (queue, status, run_at, concurrency_key): its wake-up, when it is due. */
const WAKE_ROW = `(CASE WHEN ${DUE_PENDING} THEN pg_notify('skiplock_jobs', queue)
            WHEN ${DUE_WAITING} THEN pg_notify('skiplock_admit', concurrency_key) END) IS NULL`;

const WAKE_COLUMNS = 'queue, status, run_at, concurrency_key';

const INSERT_ONE = `
WITH ins AS (
  INSERT INTO skiplock.jobs (queue, job_type, payload, idempotency_key, priority, run_at,
                             max_attempts, timeout_ms, lease_ms, concurrency_key,
                             concurrency_limit, rate_limit, rate_interval_ms, status,
                             trace_parent, trace_state)
  VALUES ($1::text, $2::text, $3::jsonb, $4::text, $5::int, ${RUN_AT}, $8::int, $9::int,
          $10::int, $11::text, $12::int, $13::int, $14::int, ${statusFor('$11::text')}, $15::text,
          $16::text)
  ON CONFLICT (queue, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
  RETURNING id, ${WAKE_COLUMNS}
)
SELECT id::text AS id, ${WAKE_ROW} AS _wake FROM ins`;

/**
 * Inserts one job. Returns its id, or no row when a job with the same idempotency key already
 * exists in the queue (`ON CONFLICT DO NOTHING`; a NULL key never conflicts). When the conflicting
 * job was inserted by a transaction still in flight, PostgreSQL waits for it: if it commits, this
 * returns no row, and the caller reads the id with `findJobByKey` in a fresh statement (whose
 * snapshot sees that commit); if it rolls back, this inserts.
 */
export function insertJob(row: JobRow): Statement {
  return {
    name: 'skiplock_insert_job_v8',
    text: INSERT_ONE,
    values: [
      row.queue,
      row.jobType,
      row.payloadJson,
      row.idempotencyKey,
      row.priority,
      row.runAt,
      row.delayMs,
      row.maxAttempts,
      row.timeoutMs,
      row.leaseMs,
      row.concurrencyKey,
      row.concurrencyLimit,
      row.rateLimit,
      row.rateIntervalMs,
      row.traceParent,
      row.traceState,
    ],
  };
}

const FIND_BY_KEY = `
SELECT id::text AS id FROM skiplock.jobs WHERE queue = $1::text AND idempotency_key = $2::text`;

/** The id of the job holding an idempotency key in a queue (the unique index answers it). */
export function findJobByKey(queue: string, key: string): Statement {
  return { name: 'skiplock_find_job_by_key_v1', text: FIND_BY_KEY, values: [queue, key] };
}

// Bulk inserts draw ids with nextval in input order (the unnest scan's order), so jobs of one bulk
// are claimed in the order given, and each input row can be matched to its id. Each column travels
// as one array parameter, so the text and parameter count stay the same for 1 or 10,000 jobs.
// Measured on 1,000 jobs (same server, median of 24 statements): the general statement with the
// conflict join 22 ms, the same without the join 15.6 ms, the shared-columns statement 12.6 ms,
// a bare `INSERT … SELECT FROM unnest(jsonb[])` into the same table 10.7 ms.

/** The run time every job of a uniform bulk gets, and by which it wakes its queue or not. */
const UNIFORM_RUN_AT = runAtOf('$5::timestamptz', '$6::bigint');

const INSERT_UNIFORM = `
WITH input AS (
  SELECT nextval('skiplock.jobs_id_seq') AS id, t.payload, t.ord
  FROM unnest($3::jsonb[]) WITH ORDINALITY AS t(payload, ord)
),
ins AS (
  INSERT INTO skiplock.jobs (id, queue, job_type, payload, priority, run_at, max_attempts,
                             timeout_ms, lease_ms, trace_parent, trace_state)
  SELECT id, $1::text, $2::text, payload, $4::int,
         ${UNIFORM_RUN_AT},
         $7::int, $8::int, $9::int, $10::text, $11::text
  FROM input
)
SELECT id::text AS id,
       (SELECT pg_notify('skiplock_jobs', $1::text)
        WHERE ${UNIFORM_RUN_AT} <= now()) IS NULL AS _wake
FROM input ORDER BY ord`;

/**
 * Inserts jobs that differ only in their payload and carry no idempotency key: the shared columns
 * are scalar parameters, only payloads are an array. With no key nothing can conflict, so every
 * row is inserted (or the statement fails) and the ids drawn are the ids stored, in input order.
 */
export function insertUniformJobs(
  shared: SharedColumns,
  payloadJsons: readonly string[],
): Statement {
  return {
    name: 'skiplock_insert_uniform_jobs_v5',
    text: INSERT_UNIFORM,
    values: [
      shared.queue,
      shared.jobType,
      payloadJsons,
      shared.priority,
      shared.runAt,
      shared.delayMs,
      shared.maxAttempts,
      shared.timeoutMs,
      shared.leaseMs,
      shared.traceParent,
      shared.traceState,
    ],
  };
}

/** One array per column, in the order of the bulk statements' parameters. */
function columnArrays(rows: readonly JobRow[], withKey: boolean): unknown[] {
  return [
    rows.map((r) => r.queue),
    rows.map((r) => r.jobType),
    rows.map((r) => r.payloadJson),
    ...(withKey ? [rows.map((r) => r.idempotencyKey)] : []),
    rows.map((r) => r.priority),
    rows.map((r) => r.runAt),
    rows.map((r) => r.delayMs),
    rows.map((r) => r.maxAttempts),
    rows.map((r) => r.timeoutMs),
    rows.map((r) => r.leaseMs),
    rows.map((r) => r.concurrencyKey),
    rows.map((r) => r.concurrencyLimit),
    rows.map((r) => r.rateLimit),
    rows.map((r) => r.rateIntervalMs),
    rows[0]?.traceParent ?? null,
    rows[0]?.traceState ?? null,
  ];
}

const INSERT_UNKEYED = `
WITH input AS (
  SELECT nextval('skiplock.jobs_id_seq') AS id, t.*
  FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::int[], $5::timestamptz[], $6::bigint[],
              $7::int[], $8::int[], $9::int[], $10::text[], $11::int[], $12::int[], $13::int[])
    WITH ORDINALITY AS t(queue, job_type, payload, priority, run_at, delay_ms, max_attempts,
                         timeout_ms, lease_ms, concurrency_key, concurrency_limit, rate_limit,
                         rate_interval_ms, ord)
),
ins AS (
  INSERT INTO skiplock.jobs (id, queue, job_type, payload, priority, run_at, max_attempts,
                             timeout_ms, lease_ms, concurrency_key, concurrency_limit,
                             rate_limit, rate_interval_ms, status, trace_parent, trace_state)
  SELECT id, queue, job_type, payload, priority,
         ${runAtOf('run_at', 'delay_ms')},
         max_attempts, timeout_ms, lease_ms, concurrency_key, concurrency_limit, rate_limit,
         rate_interval_ms, ${statusFor('concurrency_key')}, $14::text, $15::text
  FROM input
  RETURNING ${WAKE_COLUMNS}
)
SELECT id::text AS id, ${wakeFor('ins')} AS _wake FROM input ORDER BY ord`;

/** Inserts jobs with options of their own but no idempotency key: nothing can conflict. */
export function insertUnkeyedJobs(rows: readonly JobRow[]): Statement {
  return {
    name: 'skiplock_insert_unkeyed_jobs_v7',
    text: INSERT_UNKEYED,
    values: columnArrays(rows, false),
  };
}

const INSERT_KEYED = `
WITH input AS (
  SELECT nextval('skiplock.jobs_id_seq') AS id, t.*
  FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::text[], $5::int[], $6::timestamptz[],
              $7::bigint[], $8::int[], $9::int[], $10::int[], $11::text[], $12::int[],
              $13::int[], $14::int[])
    WITH ORDINALITY AS t(queue, job_type, payload, idempotency_key, priority, run_at, delay_ms,
                         max_attempts, timeout_ms, lease_ms, concurrency_key, concurrency_limit,
                         rate_limit, rate_interval_ms, ord)
),
ins AS (
  INSERT INTO skiplock.jobs (id, queue, job_type, payload, idempotency_key, priority, run_at,
                             max_attempts, timeout_ms, lease_ms, concurrency_key,
                             concurrency_limit, rate_limit, rate_interval_ms, status, trace_parent,
                             trace_state)
  SELECT id, queue, job_type, payload, idempotency_key, priority,
         ${runAtOf('run_at', 'delay_ms')},
         max_attempts, timeout_ms, lease_ms, concurrency_key, concurrency_limit, rate_limit,
         rate_interval_ms, ${statusFor('concurrency_key')}, $15::text, $16::text
  FROM input ORDER BY ord
  ON CONFLICT (queue, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
  RETURNING id, ${WAKE_COLUMNS}
)
SELECT coalesce(ins.id, existing.id)::text AS id,
       ins.id IS NOT NULL AS inserted,
       ${wakeFor('ins')} AS _wake
FROM input
LEFT JOIN ins ON ins.id = input.id
LEFT JOIN skiplock.jobs existing
  ON ins.id IS NULL AND existing.queue = input.queue
 AND existing.idempotency_key = input.idempotency_key
ORDER BY input.ord`;

/**
 * Inserts jobs of which some carry an idempotency key. Rows skipped by `ON CONFLICT DO NOTHING`
 * report the id of the job that already holds the key when this statement's snapshot can see it;
 * the caller looks up the rest (a duplicate committed after the snapshot was taken, or an earlier
 * row of this same bulk) with `findJobsByKeys` in a fresh statement.
 */
export function insertKeyedJobs(rows: readonly JobRow[]): Statement {
  return {
    name: 'skiplock_insert_keyed_jobs_v8',
    text: INSERT_KEYED,
    values: columnArrays(rows, true),
  };
}

const FIND_BY_KEYS = `
SELECT j.id::text AS id, j.queue, j.idempotency_key AS key
FROM skiplock.jobs j
JOIN unnest($1::text[], $2::text[]) AS k(queue, key)
  ON j.queue = k.queue AND j.idempotency_key = k.key`;

/** Ids of jobs holding the given (queue, idempotency key) pairs. */
export function findJobsByKeys(pairs: readonly { queue: string; key: string }[]): Statement {
  return {
    name: 'skiplock_find_jobs_by_keys_v1',
    text: FIND_BY_KEYS,
    values: [pairs.map((p) => p.queue), pairs.map((p) => p.key)],
  };
}

const INSERT_LEASED = `
INSERT INTO skiplock.jobs (queue, job_type, payload, idempotency_key, priority, run_at,
                           max_attempts, timeout_ms, lease_ms, status, attempts, locked_by,
                           locked_at, lease_expires_at, trace_parent, trace_state)
VALUES ($1::text, $2::text, $3::jsonb, $4::text, $5::int, now(), $6::int, $7::int, $8::int,
        'processing', 1, $9::text, clock_timestamp(),
        clock_timestamp() + $8::int * interval '1 millisecond', $10::text, $11::text)
ON CONFLICT (queue, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id::text AS id, queue, job_type, payload, attempts, max_attempts, priority, timeout_ms,
          lease_ms, idempotency_key, concurrency_key, trace_parent, trace_state`;

/**
 * Inserts one job already claimed by `workerId` (attempt 1, under a lease), for a worker that
 * runs it next itself: a hand-off. The lease runs from the insert (`clock_timestamp()`), not from
 * its transaction's start (`now()`): a saga step's completing transaction opens when the step
 * calls `ctx.transaction` and commits when it returns, so a step that worked on for longer than
 * its successor's lease committed the successor with its lease already run out, and a sweep took
 * it from the healthy worker that had just started it (found in review). The row is exactly what a claim would have made of a pending
 * one, so heartbeats, fenced settles and the sweeper treat it like any claimed job; it sends no
 * NOTIFY (no one else is to claim it). No row when the idempotency key is taken.
 */
export function insertLeasedJob(row: JobRow, workerId: string): Statement {
  return {
    name: 'skiplock_insert_leased_job_v4',
    text: INSERT_LEASED,
    values: [
      row.queue,
      row.jobType,
      row.payloadJson,
      row.idempotencyKey,
      row.priority,
      row.maxAttempts,
      row.timeoutMs,
      row.leaseMs,
      workerId,
      row.traceParent,
      row.traceState,
    ],
  };
}

/** The new job's id inside `insertLeasedJobThen`'s statement; NULL when nothing was inserted. */
export const HANDED_OFF_JOB_ID = '(SELECT id::bigint FROM handed_off_job)';

/**
 * `insertLeasedJob` and, in the same statement, the caller's data-modifying statements `then`
 * (rendered, each with `$1`-based parameters and no other `$` in its text), which see the new
 * job's id as `HANDED_OFF_JOB_ID`: one round trip where the caller would send a second statement
 * with the id it got back (a saga pointing at its next step's job). They run whether or not the
 * key was taken, so each must do nothing when that id is NULL. Named by its text's hash: the
 * caller's statements are few and fixed, so each connection still prepares each text once.
 */
export function insertLeasedJobThen(
  row: JobRow,
  workerId: string,
  then: readonly { text: string; values: unknown[] }[],
): Statement {
  const base = insertLeasedJob(row, workerId);
  let offset = base.values.length;
  const values = [...base.values];
  const ctes = then.map((part, i) => {
    const shift = offset;
    offset += part.values.length;
    values.push(...part.values);
    const text = part.text.replace(/\$(\d+)/g, (_, n: string) => `$${Number(n) + shift}`);
    return `then_${i} AS (${text})`;
  });
  const text = `WITH handed_off_job AS (${INSERT_LEASED}), ${ctes.join(', ')}
SELECT * FROM handed_off_job`;
  return { name: statementName('skiplock_insert_leased_then', text), text, values };
}

type SingletonRow = JobRow & { singleton: NonNullable<JobRow['singleton']> };

const SINGLETON_COLUMNS = `
INSERT INTO skiplock.jobs (queue, job_type, payload, idempotency_key, priority, run_at,
                           max_attempts, timeout_ms, lease_ms, concurrency_key, concurrency_limit,
                           rate_limit, rate_interval_ms, status, trace_parent, trace_state,
                           singleton_key, singleton_running)
VALUES ($1::text, $2::text, $3::jsonb, $4::text, $5::int, ${RUN_AT}, $8::int, $9::int, $10::int,
        $11::text, $12::int, $13::int, $14::int, ${statusFor('$11::text')}, $15::text, $16::text,
        $17::text, $18::boolean)`;

const singletonValues = (row: SingletonRow) => [
  ...insertJob(row).values,
  row.singleton.key,
  row.singleton.running,
];

// Any unique index may refuse the row: the singleton key's (a queued job holds it), the running
// one's, or the idempotency key's. Nothing is inserted, and the caller finds which job holds it.
const INSERT_SINGLETON_KEEP = `
WITH ins AS (${SINGLETON_COLUMNS}
  ON CONFLICT DO NOTHING
  RETURNING id, ${WAKE_COLUMNS}
)
SELECT id::text AS id, true AS inserted, ${WAKE_ROW} AS _wake FROM ins`;

/** Inserts a job unless a queued job (or, with `singletonRunning`, a running one) has its key. */
export function insertSingletonKeep(row: SingletonRow): Statement {
  return {
    name: 'skiplock_insert_singleton_keep_v6',
    text: INSERT_SINGLETON_KEEP,
    values: singletonValues(row),
  };
}

// Debounce: the queued job with the key takes the new payload, priority and run time, and the
// new enqueue's trace context (its run does what the newest enqueue asked). The arbiter
// is the index the row's own rule lives in; a running job (with `singleton_running`) is left
// alone, and then no row comes back. A replaced job whose new run time is due wakes its queue
// too: it may have been scheduled later until now.
// Its concurrency and rate key and limits are the new payload's too, and a job with a key goes
// back to waiting for a slot of it: admitted already (pending), it held its old key's slot,
// under the old key, even when the new run time was an hour ahead (found in review: the key's
// due jobs waited behind it; a key changed by the payload ran past the new key's limit). Its
// wake-up then goes to the admitter when it is due.
const replaceStatement = (arbiter: string, guard: string) => `
WITH ins AS (${SINGLETON_COLUMNS}
  ON CONFLICT (queue, singleton_key) WHERE ${arbiter}
  DO UPDATE SET payload = excluded.payload, priority = excluded.priority,
                run_at = excluded.run_at, max_attempts = excluded.max_attempts,
                trace_parent = excluded.trace_parent, trace_state = excluded.trace_state,
                concurrency_key = excluded.concurrency_key,
                concurrency_limit = excluded.concurrency_limit,
                rate_limit = excluded.rate_limit, rate_interval_ms = excluded.rate_interval_ms,
                status = CASE WHEN excluded.concurrency_key IS NOT NULL THEN 'waiting'
                              WHEN skiplock.jobs.status = 'waiting' THEN 'pending'
                              ELSE skiplock.jobs.status END::skiplock.job_status,
                updated_at = now()
     ${guard}
  RETURNING id, (xmax = 0) AS inserted, ${WAKE_COLUMNS}
)
SELECT id::text AS id, inserted, ${WAKE_ROW} AS _wake FROM ins`;

const INSERT_SINGLETON_REPLACE = replaceStatement(
  `singleton_key IS NOT NULL AND NOT singleton_running
     AND status IN ('pending', 'retryable', 'waiting')`,
  '',
);

// The running set's index counts a stopped run that keeps its lease (see
// migrations-flow/0006_stopped_runs_hold_singleton_keys.sql); neither it nor a running job is
// replaced.
const INSERT_SINGLETON_REPLACE_RUNNING = replaceStatement(
  `singleton_key IS NOT NULL AND singleton_running
     AND (status IN ('pending', 'retryable', 'waiting', 'processing')
          OR (status = 'cancelled' AND lease_expires_at IS NOT NULL))`,
  `WHERE skiplock.jobs.status IN ('pending', 'retryable', 'waiting')`,
);

/** Inserts a job, or replaces the payload and run time of the queued job with its key. */
export function insertSingletonReplace(row: SingletonRow): Statement {
  return row.singleton.running
    ? {
        name: 'skiplock_insert_singleton_replace_running_v9',
        text: INSERT_SINGLETON_REPLACE_RUNNING,
        values: singletonValues(row),
      }
    : {
        name: 'skiplock_insert_singleton_replace_v9',
        text: INSERT_SINGLETON_REPLACE,
        values: singletonValues(row),
      };
}

const FIND_SINGLETON = `
SELECT id::text AS id, (status = 'cancelled' AND lease_expires_at <= clock_timestamp()) AS lapsed
FROM skiplock.jobs
WHERE queue = $1::text AND singleton_key = $2::text AND singleton_running = $3::boolean
  AND (status IN ('pending', 'retryable', 'waiting', 'processing')
       OR (status = 'cancelled' AND lease_expires_at IS NOT NULL))
ORDER BY id LIMIT 1`;

/** The job holding a singleton key; `lapsed`: a stopped run whose lease ran out. */
export interface SingletonHolderRow {
  id: string;
  lapsed: boolean;
}

/**
 * The job holding a singleton key in a queue among the jobs enqueued the same way: a queued one,
 * or with `running` a running one too (the claim clears the key of other started jobs), or a run
 * an operator stopped that keeps its lease.
 */
export function findSingleton(queue: string, key: string, running: boolean): Statement {
  return {
    name: 'skiplock_find_singleton_v3',
    text: FIND_SINGLETON,
    values: [queue, key, running],
  };
}

/**
 * Clears the lease of a stopped run that ran out (its worker gone or stuck), so that the run no
 * longer holds its singleton key: the unique index cannot tell a live lease from a lapsed one.
 * Nothing else reads a lapsed lease of a cancelled job as held, and the run's own release, should
 * its worker still send it, is fenced by the lease it kept and changes nothing.
 */
export function clearLapsedStop(id: string): Statement {
  return {
    name: 'skiplock_clear_lapsed_stop_v1',
    text: `UPDATE skiplock.jobs SET lease_expires_at = NULL
WHERE id = $1::bigint AND status = 'cancelled' AND lease_expires_at <= clock_timestamp()`,
    values: [id],
  };
}
