import { sql, type SQL } from 'drizzle-orm';
import type { JobStatus } from '../schema.js';

// Reads for an operator's overview and job browser (the dashboard), each bounded whatever the
// table holds: every statement walks one of the jobs table's partial indexes (or its primary key)
// and stops after `cap` entries, so a table of 10 M finished jobs costs them nothing and a backlog
// of 10 M pending jobs costs each at most `cap` index entries. A count that reaches its cap is
// reported as "at least". The EXPLAIN tests (test/overview.test.ts) pin each one's plan.

/** Runnable side, per queue: the aging index's queues (a skip scan), bounded counts, the oldest. */
export function selectRunnableByQueue(cap: number, maxQueues: number) {
  return sql`
    WITH RECURSIVE queues AS (
      (SELECT queue FROM skiplock.jobs
       WHERE status IN ('pending', 'retryable') AND completed_at IS NULL
       ORDER BY queue LIMIT 1)
      UNION ALL
      SELECT (SELECT j.queue FROM skiplock.jobs j
              WHERE j.status IN ('pending', 'retryable') AND j.completed_at IS NULL
                AND j.queue > q.queue
              ORDER BY j.queue LIMIT 1)
      FROM queues q WHERE q.queue IS NOT NULL
    )
    SELECT q.queue, c.pending, c.retryable, c.seen,
           (extract(epoch FROM now() - o.run_at) * 1000)::float8 AS oldest_age_ms
    FROM queues q
    CROSS JOIN LATERAL (
      SELECT count(*) FILTER (WHERE s.status = 'pending')::int AS pending,
             count(*) FILTER (WHERE s.status = 'retryable')::int AS retryable,
             count(*)::int AS seen
      FROM (SELECT j.status FROM skiplock.jobs j
            WHERE j.queue = q.queue AND j.status IN ('pending', 'retryable')
              AND j.completed_at IS NULL
            LIMIT ${cap + 1}) s
    ) c
    LEFT JOIN LATERAL (
      SELECT j.run_at FROM skiplock.jobs j
      WHERE j.queue = q.queue AND j.status IN ('pending', 'retryable') AND j.completed_at IS NULL
      ORDER BY j.run_at LIMIT 1
    ) o ON true
    WHERE q.queue IS NOT NULL
    LIMIT ${maxQueues}`;
}

export interface RunnableRow {
  queue: string;
  pending: number;
  retryable: number;
  /** Entries read, at most cap + 1: more than cap means the counts are lower bounds. */
  seen: number;
  /** Age of the queue's earliest run_at; negative when its first job is not due yet. */
  oldest_age_ms: number | null;
}

/**
 * Processing jobs through the sweep index, soonest lease expiry first, so expired leases are
 * counted first and exactly up to the cap; the queues and worker ids they belong to come along.
 */
export function selectProcessingByQueue(cap: number) {
  return sql`
    SELECT queue, count(*)::int AS processing,
           count(*) FILTER (WHERE lease_expires_at < now())::int AS expired
    FROM (SELECT queue, lease_expires_at FROM skiplock.jobs
          WHERE status = 'processing' AND lease_expires_at IS NOT NULL
          ORDER BY lease_expires_at LIMIT ${cap + 1}) s
    GROUP BY queue`;
}

export interface ProcessingRow {
  queue: string;
  processing: number;
  expired: number;
}

/** Jobs waiting for a concurrency slot, through the waiting index. */
export function selectWaitingByQueue(cap: number) {
  return sql`
    SELECT queue, count(*)::int AS waiting
    FROM (SELECT queue FROM skiplock.jobs WHERE status = 'waiting'
          ORDER BY concurrency_key LIMIT ${cap + 1}) s
    GROUP BY queue`;
}

export interface WaitingRow {
  queue: string;
  waiting: number;
}

/** Dead jobs through the retention index, newest first: the last hour's are exact below the cap. */
export function selectDeadByQueue(cap: number) {
  return sql`
    SELECT queue, count(*)::int AS dead,
           count(*) FILTER (WHERE updated_at >= now() - interval '1 hour')::int AS dead_last_hour
    FROM (SELECT queue, updated_at FROM skiplock.jobs
          WHERE status = 'dead' ORDER BY updated_at DESC LIMIT ${cap + 1}) s
    GROUP BY queue`;
}

export interface DeadRow {
  queue: string;
  dead: number;
  dead_last_hour: number;
}

/**
 * Jobs that completed or went dead in the last hour, per minute (0 is the current minute), read
 * from the retention index (status, updated_at) newest first, at most `cap` of each.
 */
export function selectThroughput(cap: number) {
  const branch = (status: 'completed' | 'dead') => sql`
    (SELECT ${status}::text AS status, updated_at FROM skiplock.jobs
     WHERE status = ${sql.raw(`'${status}'`)} AND updated_at >= now() - interval '1 hour'
     ORDER BY updated_at DESC LIMIT ${cap})`;
  return sql`
    SELECT status, floor(extract(epoch FROM now() - updated_at) / 60)::int AS minutes_ago,
           count(*)::int AS jobs
    FROM (${branch('completed')} UNION ALL ${branch('dead')}) s
    GROUP BY 1, 2`;
}

export interface ThroughputRow {
  status: 'completed' | 'dead';
  minutes_ago: number;
  jobs: number;
}

/**
 * Workers seen recently: those holding a live lease (last heartbeat: its expiry less the lease),
 * and those that finished a job in the last `windowMs`, read through the sweep and retention
 * indexes, at most `cap` jobs of each.
 */
export function selectRecentWorkers(cap: number, windowMs: number) {
  const finished = (status: 'completed' | 'dead') => sql`
    (SELECT locked_by, updated_at AS seen_at, false AS running FROM skiplock.jobs
     WHERE status = ${sql.raw(`'${status}'`)}
       AND updated_at >= now() - ${windowMs}::int * interval '1 millisecond'
     ORDER BY updated_at DESC LIMIT ${cap})`;
  return sql`
    SELECT locked_by AS worker, max(seen_at) AS last_seen_at,
           count(*) FILTER (WHERE running)::int AS running
    FROM (
      (SELECT locked_by, lease_expires_at - lease_ms * interval '1 millisecond' AS seen_at,
              true AS running
       FROM skiplock.jobs
       WHERE status = 'processing' AND lease_expires_at IS NOT NULL AND lease_expires_at >= now()
       ORDER BY lease_expires_at DESC LIMIT ${cap})
      UNION ALL ${finished('completed')} UNION ALL ${finished('dead')}
    ) s
    WHERE locked_by IS NOT NULL
    GROUP BY locked_by ORDER BY max(seen_at) DESC LIMIT 200`;
}

export interface RecentWorkerRow {
  worker: string;
  last_seen_at: Date;
  running: number;
}

/** The planner's estimate of the table's rows (-1 before the first ANALYZE or VACUUM). */
export function selectJobsEstimate() {
  return sql`
    SELECT reltuples::float8 AS estimate FROM pg_class WHERE oid = 'skiplock.jobs'::regclass`;
}

export interface BrowseFilter {
  statuses?: readonly JobStatus[] | undefined;
  queue?: string | undefined;
  jobType?: string | undefined;
  workerId?: string | undefined;
  /** Only jobs with a smaller id (keyset paging, newest first). */
  beforeId?: string | undefined;
  limit: number;
  /** Look at most this many jobs (by id, newest first) for the page's matches. */
  scanLimit: number;
}

/** The window of at most `scanLimit` newest jobs before `beforeId`, by primary key. */
function window(filter: BrowseFilter, columns: SQL) {
  const before = filter.beforeId ? sql`WHERE id < ${filter.beforeId}::bigint` : sql``;
  return sql`SELECT ${columns} FROM skiplock.jobs ${before}
             ORDER BY id DESC LIMIT ${filter.scanLimit}`;
}

/**
 * The ids of the newest jobs that match, among the newest `scanLimit` before `beforeId`: a walk
 * back along the primary key that stops after `scanLimit` rows whatever the filter matches.
 */
export function selectBrowseIds(filter: BrowseFilter) {
  const where: SQL[] = [sql`true`];
  if (filter.statuses?.length) {
    where.push(sql`w.status = ANY(${sql.param(filter.statuses)}::skiplock.job_status[])`);
  }
  if (filter.queue) where.push(sql`w.queue = ${filter.queue}`);
  if (filter.jobType) where.push(sql`w.job_type = ${filter.jobType}`);
  if (filter.workerId) where.push(sql`w.locked_by = ${filter.workerId}`);
  return sql`
    SELECT w.id::text AS id
    FROM (${window(filter, sql`id, queue, job_type, status, locked_by`)}) w
    WHERE ${sql.join(where, sql` AND `)}
    ORDER BY w.id DESC LIMIT ${filter.limit}`;
}

/** How far the window of `selectBrowseIds` reached: its row count and its smallest id. */
export function selectBrowseReach(filter: BrowseFilter) {
  return sql`
    SELECT count(*)::int AS scanned, min(w.id)::text AS lowest_id
    FROM (${window(filter, sql`id`)}) w`;
}

/**
 * The jobs holding an idempotency key, in every queue: the queues come from a skip scan of the
 * idempotency index, and each (queue, key) is one probe of it.
 */
export function selectJobIdsByKey(key: string, maxQueues: number) {
  return sql`
    WITH RECURSIVE queues AS (
      (SELECT queue FROM skiplock.jobs WHERE idempotency_key IS NOT NULL ORDER BY queue LIMIT 1)
      UNION ALL
      SELECT (SELECT j.queue FROM skiplock.jobs j
              WHERE j.idempotency_key IS NOT NULL AND j.queue > q.queue
              ORDER BY j.queue LIMIT 1)
      FROM queues q WHERE q.queue IS NOT NULL
    )
    SELECT j.id::text AS id
    FROM (SELECT queue FROM queues WHERE queue IS NOT NULL LIMIT ${maxQueues}) q
    JOIN skiplock.jobs j ON j.queue = q.queue AND j.idempotency_key = ${key}
    ORDER BY j.id DESC`;
}

/**
 * The listed jobs that are dead (not of types starting with `exceptTypePrefix`), locked as
 * `strength` needs (`NO KEY UPDATE` for an update, `UPDATE` for a delete): a row another
 * transaction holds is skipped, not waited for, so an operator's bulk action never hangs behind
 * one on a job row (it reports the ids it changed; the held ones stay as they are).
 */
function lockFreeDeadJobs(
  ids: readonly string[],
  exceptTypePrefix: string | null,
  strength: 'NO KEY UPDATE' | 'UPDATE',
) {
  return sql`
    SELECT id FROM skiplock.jobs
    WHERE id = ANY(${sql.param(ids)}::bigint[]) AND status = 'dead'
      AND (${exceptTypePrefix}::text IS NULL OR NOT starts_with(job_type, ${exceptTypePrefix}::text))
    FOR ${sql.raw(strength)} SKIP LOCKED`;
}

/**
 * Runs the listed dead jobs again now, with fresh attempts (as `retryJob`, but only dead ones and
 * only those no other transaction holds): pending, or waiting for a slot when they have a
 * concurrency key (the caller admits those keys).
 */
export function retryDeadJobs(ids: readonly string[], exceptTypePrefix: string | null) {
  return sql`
    WITH free AS (${lockFreeDeadJobs(ids, exceptTypePrefix, 'NO KEY UPDATE')}),
    retried AS (
      UPDATE skiplock.jobs j
      SET status = CASE WHEN concurrency_key IS NULL THEN 'pending'
                        ELSE 'waiting' END::skiplock.job_status,
          run_at = now(), attempts = 0, lease_expires_at = NULL,
          locked_by = NULL, locked_at = NULL, updated_at = now(), singleton_key = NULL
      FROM free WHERE j.id = free.id
      RETURNING j.id, j.queue, j.concurrency_key
    )
    SELECT id::text AS id, concurrency_key,
           pg_notify('skiplock_jobs', queue) IS NULL AS notified FROM retried`;
}

/** Deletes the listed jobs that are dead and that no other transaction holds; returns their ids. */
export function deleteDeadJobs(ids: readonly string[], exceptTypePrefix: string | null) {
  return sql`
    WITH free AS (${lockFreeDeadJobs(ids, exceptTypePrefix, 'UPDATE')})
    DELETE FROM skiplock.jobs j USING free WHERE j.id = free.id
    RETURNING j.id::text AS id`;
}

/** The listed jobs, newest first, without their payloads and error lists (a list page's rows). */
export function selectJobSummaries(ids: readonly string[]) {
  return sql`
    SELECT id::text AS id, queue, job_type, NULL::jsonb AS payload, idempotency_key, status,
           priority, attempts, max_attempts, run_at, locked_at, locked_by, lease_expires_at,
           lease_ms, timeout_ms, last_error, '[]'::jsonb AS errors, completed_at, created_at,
           updated_at, concurrency_key, concurrency_limit, singleton_key
    FROM skiplock.jobs WHERE id = ANY(${sql.param(ids)}::bigint[])
    ORDER BY jobs.id DESC`;
}
