import { sql, type SQL } from 'drizzle-orm';
import type { JobStatus } from '../schema.js';
import { leaseMicros, stoppedRunHolds, type LockToken } from './fence.js';
import { lockTimeoutFor } from './lock.js';

const jobColumns = sql`
  id::text AS id, queue, job_type, payload, idempotency_key, status, priority, attempts,
  max_attempts, run_at, locked_at, locked_by, lease_expires_at, lease_ms, timeout_ms, last_error,
  errors, completed_at, created_at, updated_at, concurrency_key, concurrency_limit, singleton_key`;

export function selectJob(id: string) {
  return sql`SELECT ${jobColumns} FROM skiplock.jobs WHERE id = ${id}`;
}

export interface JobFilter {
  statuses?: readonly JobStatus[] | undefined;
  queue?: string | undefined;
  jobType?: string | undefined;
  /** Jobs whose current (or, once settled, last) attempt ran on this worker: `locked_by`. */
  workerId?: string | undefined;
  /** Jobs of this concurrency key. */
  concurrencyKey?: string | undefined;
  /** Only jobs holding a slot of their key (`slotHolder`): through `jobs_slot_holders_idx`. */
  holdingSlot?: boolean | undefined;
  limit: number;
  /** Keyset pagination: only jobs with a smaller id. */
  beforeId?: string | undefined;
}

/**
 * A job holding a slot of its concurrency key, as `skiplock.admit()` counts them (see
 * migrations-flow/0005_stopping_runs_hold_slots.sql): its predicate implies the index's.
 */
const slotHolder = sql`concurrency_key IS NOT NULL
  AND (status IN ('pending', 'retryable', 'processing')
       OR (status = 'cancelled' AND lease_expires_at IS NOT NULL AND lease_expires_at > now()))`;

export function selectJobs(filter: JobFilter) {
  const where: SQL[] = [sql`true`];
  if (filter.statuses?.length) {
    where.push(sql`status = ANY(${sql.param(filter.statuses)}::skiplock.job_status[])`);
  }
  if (filter.queue) where.push(sql`queue = ${filter.queue}`);
  if (filter.jobType) where.push(sql`job_type = ${filter.jobType}`);
  if (filter.workerId) where.push(sql`locked_by = ${filter.workerId}`);
  if (filter.concurrencyKey) where.push(sql`concurrency_key = ${filter.concurrencyKey}`);
  if (filter.holdingSlot) where.push(slotHolder);
  if (filter.beforeId) where.push(sql`jobs.id < ${filter.beforeId}::bigint`);
  // ORDER BY names the table's column: a bare `id` would be the select list's `id::text`,
  // which sorts '99' after '241' and makes keyset pages skip jobs.
  if (filter.holdingSlot && filter.concurrencyKey) {
    // A key's slot holders are few (its limit), found first through jobs_slot_holders_idx, then
    // ordered. In one query the planner, taking the key's share of the table (history mostly)
    // times the active statuses' share for the match count, walked the primary key backward for
    // the 20 newest: through every job, as fewer ever match (173 ms on 400,000 jobs, 300,000 of
    // the key completed; the dashboard's page of a waiting job reads it every 2 s).
    // An array, not `IN (SELECT ...)`: the planner, counting as many holders, merged that with
    // the same backward walk.
    return sql`
      SELECT ${jobColumns} FROM skiplock.jobs
      WHERE jobs.id = ANY(ARRAY(SELECT id FROM skiplock.jobs WHERE ${sql.join(where, sql` AND `)}))
      ORDER BY jobs.id DESC LIMIT ${filter.limit}`;
  }
  return sql`
    SELECT ${jobColumns} FROM skiplock.jobs
    WHERE ${sql.join(where, sql` AND `)}
    ORDER BY jobs.id DESC LIMIT ${filter.limit}`;
}

/**
 * A running job whose lease has run out: its worker is gone or stuck, and nothing renews it. An
 * operator may cancel or retry it, as the sweeper may take it back: a job whose `onDead` hook
 * kept failing stayed processing for good, and neither could (found in an audit). Its worker,
 * should it still be running it, then finds its lease lost at its next write (the fence checks
 * status and attempt).
 */
const expiredRun = sql`(status = 'processing' AND lease_expires_at < now())`;

/** With `waitMs`, a row another transaction holds is waited for that long (`lockTimeoutFor`). */
const lockWait = (waitMs: number | null) =>
  waitMs === null ? sql`` : sql`AND ${lockTimeoutFor(waitMs)}`;

/**
 * Cancels a job that has not started (pending, retry-waiting or slot-waiting) or whose run's
 * lease has expired; with `running`, any running one too. Its worker finds the job no longer its
 * own at a lease renewal (the fence checks the status) and aborts the handler, as for a lease
 * taken back. A run stopped so keeps its lease: it holds its concurrency slot (see
 * migrations-flow/0005_stopping_runs_hold_slots.sql) until its worker clears the lease once the
 * handler has returned (`releaseStoppedRun`), or the lease runs out. Returns the concurrency key
 * of a job that gave its slot back now (null while its stopped run still holds it).
 *
 * A stop of a live run notifies its worker (on `skiplock_stop`, at commit), which renews at once
 * when it listens instead of at its next tick: the stop reached the handler up to a third of the
 * lease later (10 s with the default lease), and a job stopped in a worker's local buffer started
 * before it.
 */
export function cancelJob(id: string, running = false, waitMs: number | null = null) {
  return sql`
    UPDATE skiplock.jobs
    SET status = 'cancelled', updated_at = now(),
        lease_expires_at = ${running ? sql`CASE WHEN status = 'processing' AND lease_expires_at > now() THEN lease_expires_at END` : sql`NULL`}
    WHERE id = ${id} AND (status IN ('pending', 'retryable', 'waiting') OR ${running ? sql`status = 'processing'` : expiredRun})
      ${lockWait(waitMs)}
    RETURNING id::text AS id, CASE WHEN lease_expires_at IS NULL THEN concurrency_key END AS concurrency_key
      ${running ? sql`, (CASE WHEN lease_expires_at IS NOT NULL THEN pg_notify('skiplock_stop', locked_by) END) IS NOT NULL AS stop_notified` : sql``}`;
}

/**
 * A run stopped by `cancelJob(id, { running: true })` whose handler has now returned: its lease
 * is cleared, and with it the slot of its concurrency key (the caller then admits the key's next
 * job). Fenced by the attempt and the worker, as every write of a run is, and by the lease the
 * stop left (`stoppedLease`, as `selectJobHolder` read it): an operator's retry resets
 * `attempts`, so a later run of the job on the same worker, stopped in its turn, carries the
 * same token, and the first run's handler returning cleared the lease of the second, still
 * running (found in review). Nothing renews a cancelled row's lease, so the stop's stays as it was.
 */
export function releaseStoppedRun(workerId: string, token: LockToken, stoppedLease: string) {
  return sql`
    UPDATE skiplock.jobs j SET lease_expires_at = NULL
    WHERE j.id = ${token.id} AND j.attempts = ${token.attempt} AND j.locked_by = ${workerId}
      AND j.status = 'cancelled'
      AND ${leaseMicros(sql`j.lease_expires_at`)} = ${stoppedLease}::bigint`;
}

/**
 * Cancels a job that has not started, unless another transaction holds its row: for a caller that
 * already holds a lock a job's settle takes after the job's row (the saga's `cancel()` holds the
 * saga row, which a completing step locks after its job row). Waiting for the row there would
 * deadlock, so a locked job counts as running and is left alone.
 */
export function cancelUnlockedJob(id: string) {
  return sql`
    UPDATE skiplock.jobs SET status = 'cancelled', updated_at = now()
    WHERE id = (SELECT id FROM skiplock.jobs
                WHERE id = ${id}::bigint AND status IN ('pending', 'retryable', 'waiting')
                FOR UPDATE SKIP LOCKED)
    RETURNING id::text AS id`;
}

export interface JobStatusRow {
  id: string;
  status: JobStatus;
  last_error: string | null;
  attempts: number;
  locked_at: Date | null;
  due: boolean;
  stopping: boolean;
}

/** Status and last error of each listed job that exists, by primary key. */
export function selectJobStatuses(ids: readonly string[]) {
  return sql`
    SELECT id::text AS id, status, last_error, attempts, locked_at,
           run_at <= clock_timestamp() AS due, ${stoppedRunHolds('jobs')} AS stopping
    FROM skiplock.jobs
    WHERE id = ANY(${sql.param(ids)}::bigint[])`;
}

export interface KeyedJobStatusRow extends JobStatusRow {
  queue: string;
  idempotency_key: string;
}

/** Status and last error of the job holding each (queue, idempotency key), where one does. */
export function selectJobStatusesByKey(pairs: readonly { queue: string; key: string }[]) {
  return sql`
    SELECT j.id::text AS id, j.queue, j.idempotency_key, j.status, j.last_error, j.attempts,
           j.locked_at, j.run_at <= clock_timestamp() AS due, ${stoppedRunHolds('j')} AS stopping
    FROM unnest(${sql.param(pairs.map((p) => p.queue))}::text[],
                ${sql.param(pairs.map((p) => p.key))}::text[]) AS k(queue, key)
    JOIN skiplock.jobs j ON j.queue = k.queue AND j.idempotency_key = k.key`;
}

/**
 * Puts a dead, cancelled or retry-waiting job, or one whose run's lease has expired, back to
 * pending to run now, with a fresh set of attempts; its error history is kept. Notifies waiting workers. A job with a concurrency key goes
 * back to `waiting` instead, and the caller admits its key. A cancelled job whose stopped run
 * still holds its lease (`stoppedRunHolds`) is left alone.
 */
export function retryJob(id: string, waitMs: number | null = null) {
  return sql`
    WITH retried AS (
      UPDATE skiplock.jobs
      SET status = CASE WHEN concurrency_key IS NULL THEN 'pending'
                        ELSE 'waiting' END::skiplock.job_status,
          run_at = now(), attempts = 0, lease_expires_at = NULL,
          locked_by = NULL, locked_at = NULL, updated_at = now(),
          -- A retry-waiting or slot-waiting job is still its key's one queued job: it keeps the
          -- key, or the next enqueue of it would queue a second job. A dead or cancelled one gave
          -- the key up (another job may hold it now): its retry runs whatever else holds it.
          -- (The CASE sees the status before this update.)
          singleton_key = CASE WHEN status IN ('dead', 'cancelled') THEN NULL
                               ELSE singleton_key END
      WHERE id = ${id} AND (status IN ('dead', 'cancelled', 'retryable', 'waiting') OR ${expiredRun})
        AND NOT ${stoppedRunHolds('jobs')} ${lockWait(waitMs)}
      RETURNING id, queue, concurrency_key
    )
    SELECT id::text AS id, concurrency_key,
           pg_notify('skiplock_jobs', queue) IS NULL AS notified FROM retried`;
}

export interface QueueStatsRow {
  queue: string;
  status: JobStatus;
  count: string;
  oldest_runnable_age_ms: number | null;
  expired_leases: number;
  dead_last_hour: number;
}

/**
 * Depth per queue and status, how long the oldest runnable job has waited, processing jobs whose
 * lease has expired (the sweeper's backlog), and jobs that went dead in the last hour.
 */
export function selectQueueStats() {
  return sql`
    SELECT queue, status, count(*)::text AS count,
           (extract(epoch FROM now() - min(run_at) FILTER (
              WHERE status IN ('pending', 'retryable', 'waiting') AND run_at <= now())) * 1000)::float8
             AS oldest_runnable_age_ms,
           count(*) FILTER (WHERE status = 'processing' AND lease_expires_at < now())::int
             AS expired_leases,
           count(*) FILTER (WHERE status = 'dead' AND updated_at >= now() - interval '1 hour')::int
             AS dead_last_hour
    FROM skiplock.jobs
    GROUP BY queue, status
    ORDER BY queue, status`;
}
