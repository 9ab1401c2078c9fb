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
 * same capped exponential backoff and jitter as any failure (its job type's, when `byType` knows
 * the type, else `fallback`), or goes dead when its attempts are spent. Everything is in the
 * database clock.
 */
export function sweepExpiredLeases(
  limit: number,
  fallback: BackoffOptions,
  byType: ReadonlyMap<string, BackoffOptions> = new Map(),
) {
  const types = [...byType.keys()];
  const column = (key: keyof BackoffOptions) => sql.param(types.map((t) => byType.get(t)![key]));
  const pick = (key: keyof BackoffOptions) =>
    sql`coalesce(b.${sql.raw(key === 'baseMs' ? 'base_ms' : key === 'maxMs' ? 'max_ms' : key)}, ${fallback[key]}::float8)`;
  return sql`
    WITH expired AS (
      SELECT id, job_type FROM skiplock.jobs
      WHERE status = 'processing' AND lease_expires_at < now()
      ORDER BY lease_expires_at
      LIMIT ${limit}
      FOR UPDATE SKIP LOCKED
    )
    UPDATE skiplock.jobs j
    SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'failed' END::skiplock.job_status,
        run_at = now() + (
          least(${pick('maxMs')},
                ${pick('baseMs')} * power(${pick('factor')}, greatest(j.attempts - 1, 0)))
          * (1 - ${pick('jitter')} + ${pick('jitter')} * random())
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
    LEFT JOIN unnest(${sql.param(types)}::text[], ${column('baseMs')}::float8[],
                     ${column('factor')}::float8[], ${column('maxMs')}::float8[],
                     ${column('jitter')}::float8[]) AS b(job_type, base_ms, factor, max_ms, jitter)
      ON b.job_type = expired.job_type
    WHERE j.id = expired.id
    RETURNING j.id::text AS id, j.job_type, j.queue, j.attempts, j.status, j.locked_by`;
}
