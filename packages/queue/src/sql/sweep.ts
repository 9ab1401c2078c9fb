import { sql } from 'drizzle-orm';
import type { BackoffOptions } from '../retry/backoff.js';
import { MAX_ERROR_HISTORY } from './settle.js';

export interface SweptRow {
  id: string;
  job_type: string;
  queue: string;
  attempts: number;
  status: 'failed' | 'dead';
  locked_by: string | null;
}

/**
 * Takes back up to `limit` processing jobs whose lease expired (the seed's two sweep statements
 * as one): the attempt counts as failed with reason `lease_expired`; the job is retried with the
 * same capped exponential backoff and jitter as any failure, or goes dead when its attempts are
 * spent. Everything is in the database clock.
 */
export function sweepExpiredLeases(limit: number, backoff: BackoffOptions) {
  return sql`
    WITH expired AS (
      SELECT id FROM skiplock.jobs
      WHERE status = 'processing' AND lease_expires_at < now()
      ORDER BY lease_expires_at
      LIMIT ${limit}
      FOR UPDATE SKIP LOCKED
    )
    UPDATE skiplock.jobs j
    SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'failed' END::skiplock.job_status,
        run_at = now() + (
          least(${backoff.maxMs}::float8,
                ${backoff.baseMs}::float8 * power(${backoff.factor}::float8, greatest(j.attempts - 1, 0)))
          * (1 - ${backoff.jitter}::float8 + ${backoff.jitter}::float8 * random())
        ) * interval '1 millisecond',
        last_error = 'lease expired: worker ' || coalesce(j.locked_by, '?') || ' stopped heartbeating',
        errors = (CASE WHEN jsonb_array_length(j.errors) >= ${MAX_ERROR_HISTORY}
                       THEN j.errors - 0 ELSE j.errors END)
                 || jsonb_build_array(jsonb_build_object(
                      'attempt', j.attempts, 'reason', 'lease_expired',
                      'message', 'lease expired on worker ' || coalesce(j.locked_by, '?'),
                      'at', now())),
        lease_expires_at = NULL,
        updated_at = now()
    FROM expired
    WHERE j.id = expired.id
    RETURNING j.id::text AS id, j.job_type, j.queue, j.attempts, j.status, j.locked_by`;
}
