import { sql } from 'drizzle-orm';

export interface ClaimedRow {
  id: string;
  queue: string;
  job_type: string;
  payload: unknown;
  attempts: number;
  max_attempts: number;
  priority: number;
  timeout_ms: number | null;
  lease_ms: number;
  idempotency_key: string | null;
}

export interface ClaimParams {
  queues: readonly string[];
  limit: number;
  workerId: string;
  /** Claimable jobs that waited longer than this go first, whatever their priority; null: never. */
  agingMs: number | null;
}

/**
 * Claims up to `limit` jobs in one statement. The CTEs lock their rows with `FOR UPDATE SKIP
 * LOCKED`, so concurrent claims skip each other's rows instead of waiting, and act as a fence that
 * keeps the planner from updating more rows than it selected.
 *
 * Two CTEs implement priority with aging (design Q11) while each stays an ordered scan of a
 * partial index: `aged` takes the jobs that have been runnable for longer than `agingMs`, oldest
 * first; `fresh` fills the rest of the batch by priority desc, run_at, id. The UPDATE counts the
 * attempt and stamps the lock token (locked_by + attempts) that fences every later write.
 */
export function claimJobs(params: ClaimParams) {
  const queues = sql.param(params.queues);
  const claimable = sql`status IN ('pending', 'failed') AND queue = ANY(${queues}::text[])`;
  const picked =
    params.agingMs === null
      ? sql`
        picked AS (
          SELECT id FROM skiplock.jobs
          WHERE ${claimable} AND run_at <= now()
          ORDER BY priority DESC, run_at, id
          LIMIT ${params.limit}
          FOR UPDATE SKIP LOCKED
        )`
      : sql`
        aged AS (
          SELECT id FROM skiplock.jobs
          WHERE ${claimable} AND run_at <= now() - ${params.agingMs} * interval '1 millisecond'
          ORDER BY run_at, id
          LIMIT ${params.limit}
          FOR UPDATE SKIP LOCKED
        ),
        fresh AS (
          SELECT id FROM skiplock.jobs
          WHERE ${claimable} AND run_at <= now() AND id NOT IN (SELECT id FROM aged)
          ORDER BY priority DESC, run_at, id
          LIMIT ${params.limit} - (SELECT count(*) FROM aged)
          FOR UPDATE SKIP LOCKED
        ),
        picked AS (SELECT id FROM aged UNION ALL SELECT id FROM fresh)`;
  return sql`
    WITH ${picked}
    UPDATE skiplock.jobs j
    SET status = 'processing',
        attempts = j.attempts + 1,
        locked_by = ${params.workerId},
        locked_at = now(),
        lease_expires_at = now() + j.lease_ms * interval '1 millisecond',
        updated_at = now()
    FROM picked
    WHERE j.id = picked.id
    RETURNING j.id::text AS id, j.queue, j.job_type, j.payload, j.attempts, j.max_attempts,
              j.priority, j.timeout_ms, j.lease_ms, j.idempotency_key`;
}
