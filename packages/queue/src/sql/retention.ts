import { sql } from 'drizzle-orm';
import type { JobStatus } from '../schema.js';
import { stoppedRunHolds } from './fence.js';

/**
 * Deletes up to `limit` terminal jobs older than their retention age, oldest first. Batched so one
 * run never holds many row locks or writes a burst of WAL; the caller loops while rows come back.
 * Each status is its own ordered walk of the retention index (status, updated_at) that stops after
 * `limit` entries: one condition over the three statuses ordered by `updated_at` was a scan of
 * every expired row and a sort of them all, per batch, so a backlog of N expired jobs cost N rows
 * read for each batch of `limit` deleted. The walks take no locks: only the `limit` rows picked
 * from them are locked (and checked again, as a retry or cancel may have moved one meanwhile),
 * where locking in each walk held up to three times `limit` rows, two thirds of them never
 * deleted (found in review).
 */
export function pruneJobs(p: { completedAgeMs: number; deadAgeMs: number; limit: number }) {
  const expiredAt = (ageMs: number) => sql`now() - ${ageMs} * interval '1 millisecond'`;
  const expired = (status: JobStatus, ageMs: number, also = sql``) => sql`
    SELECT id, updated_at FROM skiplock.jobs
    WHERE status = ${sql.raw(`'${status}'`)} AND updated_at < ${expiredAt(ageMs)} ${also}
    ORDER BY updated_at
    LIMIT ${p.limit}`;
  // A cancelled row whose stopped run still holds its lease is kept until the run ends: deleted
  // under a retention age shorter than the lease (`completedAgeMs: 0`), it let the key's next job
  // start beside the handler still working (found in review).
  return sql`
    WITH completed AS (${expired('completed', p.completedAgeMs)}),
         cancelled AS (${expired('cancelled', p.completedAgeMs, sql`AND NOT ${stoppedRunHolds('jobs')}`)}),
         dead AS (${expired('dead', p.deadAgeMs)}),
         picked AS (
           SELECT id FROM (
             SELECT id, updated_at FROM completed
             UNION ALL SELECT id, updated_at FROM cancelled
             UNION ALL SELECT id, updated_at FROM dead
           ) s
           ORDER BY updated_at
           LIMIT ${p.limit}
         ),
         doomed AS (
           SELECT j.id FROM skiplock.jobs j JOIN picked ON picked.id = j.id
           WHERE (j.status = 'completed' AND j.updated_at < ${expiredAt(p.completedAgeMs)})
              OR (j.status = 'cancelled' AND j.updated_at < ${expiredAt(p.completedAgeMs)}
                  AND NOT ${stoppedRunHolds('j')})
              OR (j.status = 'dead' AND j.updated_at < ${expiredAt(p.deadAgeMs)})
           FOR UPDATE OF j SKIP LOCKED
         )
    DELETE FROM skiplock.jobs j USING doomed WHERE j.id = doomed.id
    RETURNING j.status`;
}
