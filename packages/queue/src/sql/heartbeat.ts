import { sql } from 'drizzle-orm';
import { asyncCommit } from './commit.js';
import { ownsToken, ownsTokens, type LockToken } from './fence.js';

/**
 * Renews the leases of all of a worker's running jobs in one statement. A job missing from the
 * result is no longer ours (the sweeper took it back), and its handler must be aborted.
 */
export function extendLeases(workerId: string, tokens: readonly LockToken[]) {
  return sql`
    UPDATE skiplock.jobs j
    SET lease_expires_at = now() + j.lease_ms * interval '1 millisecond', updated_at = now()
    FROM ${asyncCommit}
    WHERE ${ownsTokens(workerId, tokens)}
    RETURNING j.id::text AS id`;
}

/** The seed's `extend_lock`: one job, an explicit lease length. */
export function extendLease(workerId: string, token: LockToken, leaseMs: number) {
  return sql`
    UPDATE skiplock.jobs j
    SET lease_expires_at = now() + ${leaseMs} * interval '1 millisecond', updated_at = now()
    WHERE ${ownsToken(workerId, token)}
    RETURNING j.id::text AS id`;
}
