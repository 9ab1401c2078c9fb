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
    ORDER BY sagas.updated_at, sagas.id
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
  /** Position for the next page: `created_at` as text, exact to the microsecond. */
  created_at: string;
}

/**
 * A page of waiting sagas, oldest first, after the cursor `after`, locked and skipping any a
 * signal or a timeout is moving right now (see `selectLiveSagas`). In start order, not by
 * `updated_at` as the live page: waiting and sleeping sagas pile up (a sleep of a month), and
 * this order is a range of `sagas_status_created_idx`, so a page reads its `limit` rows. By
 * `updated_at`, which no index covers (see the schema), every page read and sorted every waiting
 * saga: with 200,000 of them, 200,000 rows a page, every 5 s (measured in
 * `test/reconcile-waiting-page.test.ts`). The table's column, not the text of the same name in
 * the select list, which ORDER BY would otherwise sort by, with no index.
 */
export function selectWaitingSagas(limit: number, after: { createdAt: string; id: string } | null) {
  return sql`
    SELECT id, name, version, current_step, pivoted, deadline IS NOT NULL AS has_deadline,
           created_at::text AS created_at
    FROM skiplock.sagas
    WHERE status = 'waiting' AND current_step IS NOT NULL
      ${after ? sql`AND (created_at, id) > (${after.createdAt}::timestamptz, ${after.id})` : sql``}
    ORDER BY sagas.created_at, sagas.id
    LIMIT ${limit}
    FOR UPDATE SKIP LOCKED`;
}

export interface StrandedChildRow {
  /** The ended child that moves its parent. */
  id: string;
  parent: string;
  /** The parent's definition and the child step it is on: whether this runtime can move it. */
  parent_name: string;
  parent_version: number;
  parent_step: string;
  /** The parent's, as text exact to the microsecond: the position for the next page. */
  updated_at: string;
}

/**
 * Up to `limit` child sagas that ended while their parent still waits on them: the parent
 * `waiting` on the child's step, or `compensating` it once the child is undone or failed, parents
 * least recently moved first, after the cursor `after` (a parent's `updated_at` and id) when
 * given. Only when the child ended where no runtime knew the parent's version, or a parent's
 * failure came between; the child's end moves its parent in every other case.
 */
export function selectStrandedParents(
  limit: number,
  after: { updatedAt: string; id: string } | null,
) {
  // One row per parent (a parallel group has several ended branches), and only once no branch
  // of the group is active: the last branch's end is what moves the parent.
  return sql`
    SELECT id, parent, parent_name, parent_version, parent_step, updated_at::text AS updated_at
    FROM (
      SELECT DISTINCT ON (p.updated_at, p.id) c.id, p.updated_at, p.id AS parent,
             p.name AS parent_name, p.version AS parent_version, p.current_step AS parent_step
      FROM skiplock.sagas p
      JOIN skiplock.sagas c ON c.parent_id = p.id AND c.parent_step = p.current_step
      WHERE ((p.status = 'waiting' AND p.current_kind = 'step'
              AND c.status IN ('completed', 'compensated', 'cancelled', 'failed'))
          OR (p.status = 'compensating' AND p.current_kind = 'compensation'
              AND p.current_job_id IS NULL AND c.status IN ('compensated', 'cancelled', 'failed')))
        ${after ? sql`AND (p.updated_at, p.id) > (${after.updatedAt}::timestamptz, ${after.id})` : sql``}
        AND NOT EXISTS (
          SELECT 1 FROM skiplock.sagas s
          WHERE s.parent_id = p.id AND s.parent_step = p.current_step
            AND s.status IN ('queued', 'running', 'waiting', 'compensating'))
      ORDER BY p.updated_at, p.id, c.id
      LIMIT ${limit}) stranded
    ORDER BY updated_at, parent`;
}
