import { sql } from 'drizzle-orm';

export interface LiveSagaRow {
  id: string;
  current_job_id: string;
  /** Position for the next page: `updated_at` as text, exact to the microsecond. */
  updated_at: string;
}

/**
 * A page of live sagas that wait on a job, least recently moved first (a stranded saga never moves
 * again, so it comes early), after the cursor `after` when given. Locked, skipping sagas a worker
 * is moving right now, so that one pass handles each once. Reads the saga table only: whether the
 * job can still move the saga is the queue's to say (`jobStates` of `@skiplock/queue/engine`).
 */
export function selectLiveSagas(limit: number, after: { updatedAt: string; id: string } | null) {
  return sql`
    SELECT id, current_job_id::text AS current_job_id, updated_at::text AS updated_at
    FROM skiplock.sagas
    WHERE status IN ('running', 'compensating') AND current_job_id IS NOT NULL
      ${after ? sql`AND (updated_at, id) > (${after.updatedAt}::timestamptz, ${after.id})` : sql``}
    ORDER BY updated_at, id
    LIMIT ${limit}
    FOR UPDATE SKIP LOCKED`;
}

export interface WaitingSagaRow {
  id: string;
  name: string;
  version: number;
  current_step: string;
  pivoted: boolean;
  has_deadline: boolean;
  updated_at: string;
}

/**
 * A page of waiting sagas, least recently moved first, after the cursor `after`, locked and
 * skipping any a signal or a timeout is moving right now (see `selectLiveSagas`).
 */
export function selectWaitingSagas(limit: number, after: { updatedAt: string; id: string } | null) {
  return sql`
    SELECT id, name, version, current_step, pivoted, deadline IS NOT NULL AS has_deadline,
           updated_at::text AS updated_at
    FROM skiplock.sagas
    WHERE status = 'waiting' AND current_step IS NOT NULL
      ${after ? sql`AND (updated_at, id) > (${after.updatedAt}::timestamptz, ${after.id})` : sql``}
    ORDER BY updated_at, id
    LIMIT ${limit}
    FOR UPDATE SKIP LOCKED`;
}
