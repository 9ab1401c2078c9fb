import { sql } from 'drizzle-orm';
import { failedAttempt, MAX_ERROR_LENGTH } from './settle.js';

export interface ExpiredRow {
  id: string;
  job_type: string;
  queue: string;
  attempts: number;
  max_attempts: number;
  priority: number;
  idempotency_key: string | null;
  locked_by: string | null;
}

/**
 * Locks up to `limit` processing jobs whose lease expired, oldest lease first, leaving out `skip`
 * (jobs this pass already tried and left processing). Each is then settled like any failed
 * attempt, decided in code by the job type's retry policy; see `failExpiredJobs`. The sweep index
 * holds processing rows only, by lease expiry, so this reads the expired ones and nothing else.
 */
export function selectExpiredLeases(limit: number, skip: readonly string[] = []) {
  return sql`
    SELECT id::text AS id, job_type, queue, attempts, max_attempts, priority, idempotency_key,
           locked_by
    FROM skiplock.jobs
    WHERE status = 'processing' AND lease_expires_at < now()
      ${skip.length > 0 ? sql`AND id <> ALL(${sql.param(skip)}::bigint[])` : sql``}
    ORDER BY lease_expires_at
    LIMIT ${limit}
    FOR UPDATE SKIP LOCKED`;
}

/** The settle the failure decision chose for one expired job. */
export interface ExpiredFailure {
  id: string;
  /** `retryable` schedules a retry after `delayMs`; `dead` ends the job. */
  status: 'retryable' | 'dead';
  delayMs: number;
  message: string;
}

/**
 * Records the expired attempt of each job, with reason `lease_expired`, exactly as a worker
 * records a failed attempt (`failedAttempt`), in one statement. The rows are the ones
 * `selectExpiredLeases` locked in this transaction, so no lock token is needed; `status =
 * 'processing'` still guards them. The join drives a primary-key lookup per failure.
 */
export function failExpiredJobs(failures: readonly ExpiredFailure[]) {
  const column = <K extends keyof ExpiredFailure>(key: K) =>
    sql.param(
      failures.map((f) => (key === 'message' ? f.message.slice(0, MAX_ERROR_LENGTH) : f[key])),
    );
  return sql`
    UPDATE skiplock.jobs j
    SET ${failedAttempt({
      status: sql`f.status`,
      delayMs: sql`f.delay_ms`,
      reason: sql`'lease_expired'::text`,
      message: sql`f.message`,
    })}
    FROM unnest(${column('id')}::bigint[], ${column('status')}::skiplock.job_status[],
                ${column('delayMs')}::float8[], ${column('message')}::text[])
           AS f(id, status, delay_ms, message)
    WHERE j.id = f.id AND j.status = 'processing'
    RETURNING j.id::text AS id`;
}

/**
 * Notes on a job whose `onDead` hook threw why it is still processing, in its `last_error`: only
 * the worker's log said so, and `jobs show` and the dashboard showed a running job with an
 * expired lease and no reason (found in an audit). The row stays as it was otherwise; the next
 * pass tries the hook again.
 */
export function noteDeadHookFailure(id: string, message: string) {
  return sql`
    UPDATE skiplock.jobs SET last_error = ${message.slice(0, MAX_ERROR_LENGTH)}
    WHERE id = ${id} AND status = 'processing'
      -- Each pass meets it again: no new row version when nothing changed.
      AND last_error IS DISTINCT FROM ${message.slice(0, MAX_ERROR_LENGTH)}`;
}
