import { sql } from 'drizzle-orm';

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
}

export interface InsertedRow {
  ord: string;
  id: string;
  inserted: boolean;
}

/**
 * Inserts any number of jobs in one statement: each column travels as one array parameter and is
 * spread by `unnest`, so the statement text and parameter count stay the same for 1 or 10,000 jobs.
 * Ids are drawn up front so every input row can be matched to its result, including rows skipped by
 * `ON CONFLICT DO NOTHING`; those report the id of the job that already holds the key when this
 * statement's snapshot can see it (the caller looks up the rest in a fresh statement).
 */
export function insertJobs(rows: readonly JobRow[]) {
  const col = <T>(pick: (row: JobRow) => T) => sql.param(rows.map(pick));
  return sql`
    WITH input AS (
      SELECT nextval('skiplock.jobs_id_seq') AS id, t.*
      FROM unnest(
        ${col((r) => r.queue)}::text[], ${col((r) => r.jobType)}::text[],
        ${col((r) => r.payloadJson)}::jsonb[], ${col((r) => r.idempotencyKey)}::text[],
        ${col((r) => r.priority)}::int[], ${col((r) => r.runAt)}::timestamptz[],
        ${col((r) => r.delayMs)}::bigint[], ${col((r) => r.maxAttempts)}::int[],
        ${col((r) => r.timeoutMs)}::int[], ${col((r) => r.leaseMs)}::int[]
      ) WITH ORDINALITY AS t(queue, job_type, payload, idempotency_key, priority, run_at, delay_ms,
                             max_attempts, timeout_ms, lease_ms, ord)
    ),
    ins AS (
      INSERT INTO skiplock.jobs (id, queue, job_type, payload, idempotency_key, priority, run_at,
                                 max_attempts, timeout_ms, lease_ms)
      SELECT id, queue, job_type, payload, idempotency_key, priority,
             coalesce(run_at, now() + coalesce(delay_ms, 0) * interval '1 millisecond'),
             max_attempts, timeout_ms, lease_ms
      FROM input ORDER BY ord
      ON CONFLICT (queue, idempotency_key) DO NOTHING
      RETURNING id
    )
    SELECT input.ord::text AS ord,
           coalesce(ins.id, existing.id)::text AS id,
           ins.id IS NOT NULL AS inserted
    FROM input
    LEFT JOIN ins ON ins.id = input.id
    LEFT JOIN skiplock.jobs existing
      ON ins.id IS NULL AND existing.queue = input.queue
     AND existing.idempotency_key = input.idempotency_key
    ORDER BY input.ord`;
}

/** Ids of jobs holding the given (queue, idempotency key) pairs. */
export function findJobsByKeys(pairs: readonly { queue: string; key: string }[]) {
  return sql`
    SELECT j.id::text AS id, j.queue, j.idempotency_key AS key
    FROM skiplock.jobs j
    JOIN unnest(${sql.param(pairs.map((p) => p.queue))}::text[],
                ${sql.param(pairs.map((p) => p.key))}::text[]) AS k(queue, key)
      ON j.queue = k.queue AND j.idempotency_key = k.key`;
}
