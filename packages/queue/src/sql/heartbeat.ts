import { sql } from 'drizzle-orm';
import { commitItem } from './commit.js';
import { ownsToken, ownsTokens, type LockToken } from './fence.js';

/**
 * Renews the leases of all of a worker's running jobs in one statement, without ever waiting on a
 * row lock: rows locked by another transaction (the job's own `completeWith` or saga
 * `ctx.transaction`, an operator's) are skipped, and reported `renewed = false` while they still
 * carry this worker's token. A job missing from the result is no longer ours (the sweeper took it
 * back), and its handler must be aborted. A plain `UPDATE` here waited on one locked row, and every
 * other lease of the worker expired behind it (all 9 healthy jobs re-run with a 2 s lease and one
 * row locked for 4 s).
 *
 * A renewal never shortens a lease: a handler that extended its own (`ctx.extendLease(60_000)`)
 * keeps it until then. Setting it to now + the job's lease undid the extension at the next beat,
 * and a sweeper elsewhere took back a job still inside the lease it had asked for (found in
 * review: a second attempt ran while the first still worked).
 */
export function extendLeases(workerId: string, tokens: readonly LockToken[], asyncCommit: boolean) {
  return sql`
    WITH lockable AS (
      SELECT j.id FROM skiplock.jobs j
      WHERE ${ownsTokens(workerId, tokens)}
      FOR UPDATE SKIP LOCKED
    ), renewed AS (
      UPDATE skiplock.jobs j
      SET lease_expires_at = greatest(j.lease_expires_at, now() + j.lease_ms * interval '1 millisecond'),
          updated_at = now()
      FROM lockable, ${commitItem(asyncCommit)}
      WHERE j.id = lockable.id
      RETURNING j.id
    )
    SELECT j.id::text AS id, j.id IN (SELECT id FROM renewed) AS renewed
    FROM skiplock.jobs j
    WHERE ${ownsTokens(workerId, tokens)}`;
}

/**
 * The seed's `extend_lock`: one job, an explicit lease length. Never shortens the lease: a
 * shorter one let a sweeper elsewhere take back a job whose handler still ran (found in review).
 */
export function extendLease(workerId: string, token: LockToken, leaseMs: number) {
  return sql`
    UPDATE skiplock.jobs j
    SET lease_expires_at = greatest(j.lease_expires_at, now() + ${leaseMs} * interval '1 millisecond'),
        updated_at = now()
    WHERE ${ownsToken(workerId, token)}
    RETURNING j.id::text AS id`;
}
