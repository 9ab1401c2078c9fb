import { sql } from 'drizzle-orm';
import { asyncCommit } from './commit.js';
import type { LockToken } from './settle.js';

/**
 * Renews the leases of all of a worker's running jobs in one statement. A job missing from the
 * result is no longer ours (the sweeper took it back), and its handler must be aborted.
 */
export function extendLeases(workerId: string, tokens: readonly LockToken[]) {
  return sql`
    UPDATE skiplock.jobs j
    SET lease_expires_at = now() + j.lease_ms * interval '1 millisecond', updated_at = now()
    FROM unnest(${sql.param(tokens.map((t) => t.id))}::bigint[],
                ${sql.param(tokens.map((t) => t.attempt))}::int[]) AS d(id, attempt),
         ${asyncCommit}
    WHERE j.id = ANY(${sql.param(tokens.map((t) => t.id))}::bigint[])
      AND j.id = d.id AND j.attempts = d.attempt
      AND j.locked_by = ${workerId} AND j.status = 'processing'
    RETURNING j.id::text AS id`;
}

/** The seed's `extend_lock`: one job, an explicit lease length. */
export function extendLease(workerId: string, token: LockToken, leaseMs: number) {
  return sql`
    UPDATE skiplock.jobs j
    SET lease_expires_at = now() + ${leaseMs} * interval '1 millisecond', updated_at = now()
    WHERE j.id = ${token.id} AND j.attempts = ${token.attempt}
      AND j.locked_by = ${workerId} AND j.status = 'processing'
    RETURNING j.id::text AS id`;
}
