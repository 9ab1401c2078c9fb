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
 * `test/reconcile-pages.test.ts`). The table's column, not the text of the same name in
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
  /** The parent's `created_at`, as text exact to the microsecond: a position for the next page. */
  created_at: string;
}

/** A row of `selectStrandedParents`: a stranded child, or none (all null) on a page with none. */
export type StrandedPageRow = { [K in keyof StrandedChildRow]: StrandedChildRow[K] | null } & {
  /** The last parent the page read, as a position (`created_at` as text, and id). */
  page_end_at: string;
  page_end_id: string;
  /** How many parents the page read: fewer than `scan` once it reached the end. */
  scanned: number;
};

/** A page of parents of one status, oldest first, after the cursor: a range of its index. */
function parentsPage(
  status: 'waiting' | 'compensating',
  scan: number,
  after: { createdAt: string; id: string } | null,
) {
  // Filters on the index's range, not conditions of it: the compensating range may read every
  // saga compensating now after the cursor (as many as compensate at once; an index on
  // current_job_id would make every pointer update non-HOT).
  const kind =
    status === 'waiting'
      ? sql`current_kind = 'step'`
      : sql`current_kind = 'compensation' AND current_job_id IS NULL`;
  return sql`
    SELECT id, name, version, status, current_step, created_at FROM skiplock.sagas
    WHERE status = ${status} AND ${kind}
      ${after ? sql`AND (created_at, id) > (${after.createdAt}::timestamptz, ${after.id})` : sql``}
    ORDER BY sagas.created_at, sagas.id
    LIMIT ${scan}`;
}

/**
 * Reads a page of at most `scan` sagas that could be waiting on a child saga (`waiting` at a
 * step, or `compensating` a step with no job of its own), oldest first after the cursor `after`,
 * and returns up to `limit` of them whose child saga (or every parallel branch) of that step has
 * ended, one row each with an ended child: the parent still waits on it, or compensates it once
 * it is undone or failed. Only when the child ended where no runtime knew the parent's version,
 * or a parent's failure came between; the child's end moves its parent in every other case.
 * Every row also says where the page ended, and one row (its child null) does when it found none.
 *
 * Driven by the page of parents, each looked up in `sagas_parent_idx`, so a pass costs the same
 * however many sagas have ever run: finished sagas stay in the table, and the join of every
 * parent to every ended child that this replaced read all of them every pass (345 ms a pass with
 * 1.25 million finished sagas, 600,000 of them branches, and 200,000 asleep; measured with
 * EXPLAIN ANALYZE, see `test/reconcile-pages.test.ts`).
 */
export function selectStrandedParents(
  limit: number,
  scan: number,
  after: { createdAt: string; id: string } | null,
) {
  // Two ranges of sagas_status_created_idx merged: one with `status IN (...)` is sorted whole.
  // One row per parent (a parallel group has several ended branches), and only once no branch
  // of the group is active: the last branch's end is what moves the parent.
  return sql`
    WITH page AS (
      SELECT * FROM (
        (${parentsPage('waiting', scan, after)})
        UNION ALL
        (${parentsPage('compensating', scan, after)})
      ) parents
      ORDER BY parents.created_at, parents.id
      LIMIT ${scan}
    ),
    page_end AS (
      SELECT created_at, id, (SELECT count(*) FROM page)::int AS scanned
      FROM page ORDER BY page.created_at DESC, page.id DESC LIMIT 1
    ),
    stranded AS (
      SELECT DISTINCT ON (p.created_at, p.id) c.id, p.id AS parent, p.name AS parent_name,
             p.version AS parent_version, p.current_step AS parent_step, p.created_at
      FROM page p
      JOIN skiplock.sagas c ON c.parent_id = p.id AND c.parent_step = p.current_step
      WHERE ((p.status = 'waiting' AND c.status IN ('completed', 'compensated', 'cancelled', 'failed'))
          OR (p.status = 'compensating' AND c.status IN ('compensated', 'cancelled', 'failed')))
        AND NOT EXISTS (
          SELECT 1 FROM skiplock.sagas s
          WHERE s.parent_id = p.id AND s.parent_step = p.current_step
            AND s.status IN ('queued', 'running', 'waiting', 'compensating'))
      ORDER BY p.created_at, p.id, c.id
      LIMIT ${limit}
    )
    SELECT s.id, s.parent, s.parent_name, s.parent_version, s.parent_step,
           s.created_at::text AS created_at, e.created_at::text AS page_end_at,
           e.id AS page_end_id, e.scanned
    FROM page_end e LEFT JOIN stranded s ON true
    ORDER BY s.created_at, s.parent`;
}
