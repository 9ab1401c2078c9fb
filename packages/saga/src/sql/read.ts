import { sql, type SQL } from 'drizzle-orm';
import type { SagaStatus } from '../schema.js';

export interface SagaReadRow {
  id: string;
  name: string;
  version: number;
  status: SagaStatus;
  input: unknown;
  current_step: string | null;
  current_kind: 'step' | 'compensation' | null;
  current_job_id: string | null;
  /** When the saga reached its current step (see the schema's `currentSince`). */
  current_since: Date | null;
  pivoted: boolean;
  cancel_requested: boolean;
  deadline: Date | null;
  error: string | null;
  created_at: Date;
  updated_at: Date;
  finished_at: Date | null;
  lock_key: string | null;
  parent_id: string | null;
  parent_step: string | null;
  /** Exact creation time as text, for keyset cursors (a JS Date drops microseconds). */
  created_key: string;
}

const readColumns = sql`
  id, name, version, status, input, current_step, current_kind, current_job_id::text AS current_job_id,
  current_since, pivoted, cancel_requested, deadline, error, created_at, updated_at, finished_at, lock_key,
  parent_id, parent_step, created_at::text AS created_key`;

export function selectSaga(id: string) {
  return sql`SELECT ${readColumns} FROM skiplock.sagas WHERE id = ${id}`;
}

export interface ChildRow {
  id: string;
  name: string;
  parent_step: string;
  status: SagaStatus;
}

/** A saga's child sagas (`.child()` steps), oldest first. */
export function selectChildren(parentId: string) {
  return sql`
    SELECT id, name, parent_step, status FROM skiplock.sagas
    WHERE parent_id = ${parentId} ORDER BY created_at, id`;
}

export interface SagaListFilter {
  statuses?: readonly SagaStatus[] | undefined;
  name?: string | undefined;
  version?: number | undefined;
  limit: number;
  /** Keyset: only sagas created before this (created_at, id). */
  after?: { createdKey: string; id: string } | undefined;
  /** Look at most this many sagas (newest first, along one index) for the page's matches. */
  scanLimit?: number | undefined;
}

/**
 * A listSagas cursor's time read as the page's statements read it (`sagaWindow`), alone: a data
 * error here is the cursor's.
 */
export function castCursorTime(time: string) {
  return sql`SELECT ${time}::timestamptz AS t`;
}

/** Default of `SagaListFilter.scanLimit`. */
export const SAGA_SCAN_LIMIT = 20_000;

/**
 * The window the filter walks, and what is left to test in it. With a name, the name index
 * (name, created_at, id); else with one status, the status index (the status written out, as in
 * `countSagasByStatus`: with a parameter the planner may walk the creation index instead); else
 * the creation index. The walk goes newest first from `after` and stops after `scanLimit` rows.
 */
function sagaWindow(filter: SagaListFilter, columns: SQL) {
  const bound: SQL[] = [sql`true`];
  const rest: SQL[] = [];
  const statuses = filter.statuses ?? [];
  if (filter.name) {
    bound.push(sql`name = ${filter.name}`);
    if (statuses.length) {
      rest.push(sql`w.status = ANY(${sql.param(statuses)}::skiplock.saga_status[])`);
    }
  } else if (statuses.length === 1) {
    const [status] = statuses;
    if (!/^[a-z]+$/.test(status!)) throw new Error(`not a saga status: ${status}`);
    bound.push(sql`status = ${sql.raw(`'${status}'`)}`);
  } else if (statuses.length) {
    rest.push(sql`w.status = ANY(${sql.param(statuses)}::skiplock.saga_status[])`);
  }
  if (filter.version !== undefined) rest.push(sql`w.version = ${filter.version}`);
  if (filter.after) {
    bound.push(
      sql`(created_at, id) < (${filter.after.createdKey}::timestamptz, ${filter.after.id})`,
    );
  }
  const window = sql`
    SELECT ${columns} FROM skiplock.sagas WHERE ${sql.join(bound, sql` AND `)}
    ORDER BY created_at DESC, id DESC LIMIT ${filter.scanLimit ?? SAGA_SCAN_LIMIT}`;
  return { window, rest };
}

/**
 * Newest first, paged by (created_at, id) so pages stay stable while sagas are added. Reads at
 * most `scanLimit` sagas along one index (see `sagaWindow`), whatever the filter matches: a
 * filter that matches few of millions of sagas gives a short page, and the caller searches on
 * from where the window ended (`selectSagaReach`). A filter the index settles alone stops at the
 * page.
 */
export function selectSagas(filter: SagaListFilter) {
  const { window, rest } = sagaWindow(filter, sql`*`);
  return sql`
    SELECT ${readColumns}
    FROM (${window}) w
    WHERE ${sql.join([sql`true`, ...rest], sql` AND `)}
    ORDER BY created_at DESC, id DESC LIMIT ${filter.limit}`;
}

/** Whether `selectSagas` can stop short of its page at the end of its window (not the data). */
export function sagaWindowFilters(filter: SagaListFilter): boolean {
  return sagaWindow(filter, sql`id`).rest.length > 0;
}

/** How far the window of `selectSagas` reached: its row count and its oldest (created_at, id). */
export function selectSagaReach(filter: SagaListFilter) {
  const { window } = sagaWindow(filter, sql`created_at, id`);
  return sql`
    SELECT (count(*) OVER ())::int AS scanned, w.created_at::text AS created_key, w.id
    FROM (${window}) w
    ORDER BY w.created_at, w.id LIMIT 1`;
}

/**
 * Sagas per status, each count stopping at `cap + 1` rows of the status index (an index-only
 * scan when the visibility map allows), so a table of millions of sagas costs `cap` entries each.
 * Each status is its own branch with its value written out and newest first: with a parameter, or
 * without the order, the planner read the whole table (the EXPLAIN test). A status most sagas are
 * in may be read along the creation index instead, which finds its `cap + 1` rows as soon.
 */
export function countSagasByStatus(statuses: readonly SagaStatus[], cap: number) {
  const branches = statuses.map((status) => {
    if (!/^[a-z]+$/.test(status)) throw new Error(`not a saga status: ${status}`);
    return sql`
      SELECT ${status}::text AS status, count(*)::int AS count
      FROM (SELECT 1 FROM skiplock.sagas
            WHERE status = ${sql.raw(`'${status}'`)}
            ORDER BY created_at DESC LIMIT ${cap + 1}) c`;
  });
  return sql.join(branches, sql` UNION ALL `);
}

/** The definitions (name, version) with sagas, from a skip scan of the name index. */
export function selectSagaNames(maxNames: number) {
  return sql`
    WITH RECURSIVE names AS (
      (SELECT name FROM skiplock.sagas ORDER BY name LIMIT 1)
      UNION ALL
      SELECT (SELECT x.name FROM skiplock.sagas x WHERE x.name > n.name ORDER BY x.name LIMIT 1)
      FROM names n WHERE n.name IS NOT NULL
    )
    SELECT name FROM names WHERE name IS NOT NULL LIMIT ${maxNames}`;
}
