import { sql } from 'drizzle-orm';

/**
 * Cancels a saga's queued job unless a worker holds it. `SKIP LOCKED` matters: a worker
 * completing the job locks the job row first and then the saga row, while `cancel()` holds the
 * saga row; waiting here would deadlock, so a locked job counts as running.
 */
export function cancelQueuedJob(jobId: string) {
  return sql`
    UPDATE skiplock.jobs SET status = 'cancelled', updated_at = now()
    WHERE id = (SELECT id FROM skiplock.jobs
                WHERE id = ${jobId}::bigint AND status IN ('pending', 'failed')
                FOR UPDATE SKIP LOCKED)
    RETURNING id::text AS id`;
}
