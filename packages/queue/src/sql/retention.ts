import { sql } from 'drizzle-orm';

/**
 * Deletes up to `limit` terminal jobs older than their retention age, oldest first. Batched so one
 * run never holds many row locks or writes a burst of WAL; the caller loops while rows come back.
 */
export function pruneJobs(p: { completedAgeMs: number; deadAgeMs: number; limit: number }) {
  return sql`
    WITH doomed AS (
      SELECT id FROM skiplock.jobs
      WHERE (status IN ('completed', 'cancelled')
             AND updated_at < now() - ${p.completedAgeMs} * interval '1 millisecond')
         OR (status = 'dead' AND updated_at < now() - ${p.deadAgeMs} * interval '1 millisecond')
      ORDER BY updated_at
      LIMIT ${p.limit}
      FOR UPDATE SKIP LOCKED
    )
    DELETE FROM skiplock.jobs j USING doomed WHERE j.id = doomed.id
    RETURNING j.status`;
}
