import type pg from 'pg';
import { checkJobFilter, toJob, type Job } from './client.js';
import { runSql, type Queryable } from './db.js';
import { errorMessage, SkiplockError } from './errors.js';
import { createDefaultLogger, type Logger } from './logger.js';
import { isRowId } from './row-id.js';
import type { JobStatus } from './schema.js';
import { admitKeys } from './sql/admit.js';
import {
  deleteDeadJobs,
  retryDeadJobs as retryDeadJobsSql,
  selectBrowseIds,
  selectBrowseReach,
  selectDeadByQueue,
  selectJobIdsByKey,
  selectJobsEstimate,
  selectJobSummaries,
  selectProcessingByQueue,
  selectRecentWorkers,
  selectRunnableByQueue,
  selectThroughput,
  selectWaitingByQueue,
  type DeadRow,
  type ProcessingRow,
  type RecentWorkerRow,
  type RunnableRow,
  type ThroughputRow,
  type WaitingRow,
} from './sql/overview.js';

// Operator reads and bulk actions for tools built on the queue (the dashboard), through
// `@skiplock/queue/engine`. Every read is bounded (see sql/overview.ts): counts stop at `cap` and
// say so, so the overview costs the same on a table of 10 M jobs as on one of 10 thousand.

/**
 * One queue's line of the overview. Counts are exact below `cap`; `atLeast` names the others,
 * lower bounds of at most `cap` (a read sees `cap + 1` rows to know it was cut).
 */
export interface QueueCounts {
  queue: string;
  pending: number;
  retryable: number;
  processing: number;
  waiting: number;
  dead: number;
  /** Dead jobs whose last update was in the last hour (exact unless `dead` is capped too). */
  deadLastHour: number;
  /** Processing jobs whose lease has passed: the sweeper has not taken them back yet. */
  expiredLeases: number;
  /** How long the oldest due pending or retry-waiting job has waited; null when none is due. */
  oldestRunnableAgeMs: number | null;
  /** The counts that reached the cap: the real number is at least the one shown. */
  atLeast: JobStatus[];
}

export interface QueueOverview {
  queues: QueueCounts[];
  /** The planner's estimate of every job in the table (finished ones included); null if unknown. */
  estimatedJobs: number | null;
  /** The cap each count stops at. */
  cap: number;
}

export interface OverviewOptions {
  /** Each count stops here (default 10,000). */
  cap?: number;
  /** At most this many queues with runnable jobs are listed (default 200). */
  maxQueues?: number;
}

/**
 * A bound given to a read: a whole number from 1 to `max` (by default any that PostgreSQL's
 * bigint holds), else a SkiplockError naming it; NaN or 2.5 reached the server as LIMIT NaN.
 */
function checkBound(name: string, value: number, max = Number.MAX_SAFE_INTEGER): number {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new SkiplockError(
      'invalid_limit',
      `${name} must be an integer from 1 to ${max}, got ${typeof value === 'number' ? value : JSON.stringify(value)}`,
    );
  }
  return value;
}

/** Per queue: jobs by state (bounded), oldest runnable job's age, expired leases, dead jobs. */
export async function readQueueOverview(
  db: Queryable,
  options: OverviewOptions = {},
): Promise<QueueOverview> {
  const cap = checkBound('cap', options.cap ?? 10_000);
  const maxQueues = checkBound('maxQueues', options.maxQueues ?? 200);
  const [runnable, processing, waiting, dead, estimate] = await Promise.all([
    runSql<RunnableRow>(db, selectRunnableByQueue(cap, maxQueues)),
    runSql<ProcessingRow>(db, selectProcessingByQueue(cap)),
    runSql<WaitingRow>(db, selectWaitingByQueue(cap)),
    runSql<DeadRow>(db, selectDeadByQueue(cap)),
    runSql<{ estimate: number | null }>(db, selectJobsEstimate()),
  ]);
  const byQueue = new Map<string, QueueCounts>();
  const line = (queue: string): QueueCounts => {
    let counts = byQueue.get(queue);
    if (!counts) {
      counts = {
        queue,
        pending: 0,
        retryable: 0,
        processing: 0,
        waiting: 0,
        dead: 0,
        deadLastHour: 0,
        expiredLeases: 0,
        oldestRunnableAgeMs: null,
        atLeast: [],
      };
      byQueue.set(queue, counts);
    }
    return counts;
  };
  /** A count as shown: one the read cut reads as the cap, a lower bound. */
  const atMost = (n: number) => Math.min(n, cap);
  for (const r of runnable.rows) {
    const q = line(r.queue);
    q.pending = atMost(r.pending);
    q.retryable = atMost(r.retryable);
    q.oldestRunnableAgeMs =
      r.oldest_age_ms !== null && r.oldest_age_ms >= 0 ? r.oldest_age_ms : null;
    if (r.seen > cap) q.atLeast.push('pending', 'retryable');
  }
  // The other reads are capped across queues: a capped total makes every queue's count a bound.
  const capped = (rows: readonly object[], count: (r: never) => number) =>
    rows.reduce((sum, r) => sum + count(r as never), 0) > cap;
  const processingCapped = capped(processing.rows, (r: ProcessingRow) => r.processing);
  for (const r of processing.rows) {
    const q = line(r.queue);
    q.processing = atMost(r.processing);
    q.expiredLeases = atMost(r.expired);
    if (processingCapped) q.atLeast.push('processing');
  }
  const waitingCapped = capped(waiting.rows, (r: WaitingRow) => r.waiting);
  for (const r of waiting.rows) {
    const q = line(r.queue);
    q.waiting = atMost(r.waiting);
    if (waitingCapped) q.atLeast.push('waiting');
  }
  const deadCapped = capped(dead.rows, (r: DeadRow) => r.dead);
  for (const r of dead.rows) {
    const q = line(r.queue);
    q.dead = atMost(r.dead);
    q.deadLastHour = atMost(r.dead_last_hour);
    if (deadCapped) q.atLeast.push('dead');
  }
  const total = estimate.rows[0]?.estimate ?? -1;
  return {
    queues: [...byQueue.values()].sort((a, b) => a.queue.localeCompare(b.queue)),
    estimatedJobs: total >= 0 ? Math.round(total) : null,
    cap,
  };
}

/** Jobs that completed and went dead in each of the last 60 minutes (index 0: this minute). */
export interface Throughput {
  completed: number[];
  dead: number[];
  /** True when a series reached the cap: its oldest minutes are undercounted. */
  capped: boolean;
}

export async function readThroughput(
  db: Queryable,
  options: { cap?: number } = {},
): Promise<Throughput> {
  // Polled by open overview pages: a small cap keeps each poll cheap on a busy queue.
  const cap = checkBound('cap', options.cap ?? 20_000);
  const { rows } = await runSql<ThroughputRow>(db, selectThroughput(cap));
  const completed = new Array<number>(60).fill(0);
  const dead = new Array<number>(60).fill(0);
  for (const r of rows) {
    const minute = Math.min(59, Math.max(0, r.minutes_ago));
    (r.status === 'completed' ? completed : dead)[minute]! += r.jobs;
  }
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  return { completed, dead, capped: sum(completed) >= cap || sum(dead) >= cap };
}

export interface RecentWorker {
  workerId: string;
  lastSeenAt: Date;
  /** Jobs it holds a live lease on. */
  running: number;
}

/** Workers that hold a live lease or finished a job in the last `windowMs` (default 5 min). */
export async function readRecentWorkers(
  db: Queryable,
  options: { cap?: number; windowMs?: number } = {},
): Promise<RecentWorker[]> {
  const { rows } = await runSql<RecentWorkerRow>(
    db,
    selectRecentWorkers(
      checkBound('cap', options.cap ?? 10_000),
      // The statement reads it as an int.
      checkBound('windowMs', options.windowMs ?? 300_000, 2_147_483_647),
    ),
  );
  return rows.map((r) => ({
    workerId: r.worker,
    lastSeenAt: new Date(r.last_seen_at),
    running: r.running,
  }));
}

/** A job as a list shows it: every field but the payload and the error list. */
export type JobSummary = Omit<Job, 'payload' | 'errors'>;

export interface BrowseOptions {
  statuses?: readonly JobStatus[] | undefined;
  queue?: string | undefined;
  jobType?: string | undefined;
  workerId?: string | undefined;
  /** Only jobs older (smaller id) than this: the previous page's `nextBeforeId`. */
  beforeId?: string | undefined;
  /** Page size, 1-500 (default 50). */
  limit?: number | undefined;
  /** Look at most this many jobs back for the page's matches (default 20,000). */
  scanLimit?: number | undefined;
}

export interface BrowsePage {
  jobs: JobSummary[];
  /** Where the next page starts (pass as `beforeId`); null when nothing older is left. */
  nextBeforeId: string | null;
  /**
   * False when the page is short because the scan stopped at `scanLimit` jobs, not because no
   * older job matches: `nextBeforeId` then goes on searching from where it stopped.
   */
  complete: boolean;
}

function checkJobId(id: string, what: string): string {
  // The pattern alone let 19 digits past bigint's maximum through to PostgreSQL's own error.
  if (typeof id !== 'string' || !isRowId(id)) {
    throw new SkiplockError('invalid_id', `${what} must be a job id, got ${JSON.stringify(id)}`);
  }
  return id;
}

/**
 * Jobs newest first by id, filtered, a page at a time (keyset). Each call reads at most
 * `scanLimit` jobs along the primary key, so a filter that matches few of 10 M jobs answers in
 * bounded time with a short page and a `nextBeforeId` to search on from.
 */
export async function browseJobs(db: Queryable, options: BrowseOptions = {}): Promise<BrowsePage> {
  const limit = checkBound('limit', options.limit ?? 50, 500);
  const scanLimit = checkBound('scanLimit', options.scanLimit ?? 20_000);
  checkJobFilter(options as Record<string, unknown>);
  if (options.beforeId !== undefined) checkJobId(options.beforeId, 'beforeId');
  const filter = { ...options, limit, scanLimit: Math.max(scanLimit, limit) };
  const { rows: ids } = await runSql<{ id: string }>(db, selectBrowseIds(filter));
  const jobs =
    ids.length === 0
      ? []
      : await readJobSummaries(
          db,
          ids.map((r) => r.id),
        );
  // A full page of ids goes on from its last id. Decided by the ids, not the rows read after
  // them: a job deleted between the two reads (retention, an operator) made the page short, and
  // the scan window's reach then sent the next page past every older match (found in review).
  if (ids.length === limit) {
    return { jobs, nextBeforeId: ids[ids.length - 1]!.id, complete: true };
  }
  const { rows } = await runSql<{ scanned: number; lowest_id: string | null }>(
    db,
    selectBrowseReach(filter),
  );
  const reach = rows[0];
  const stopped = reach !== undefined && reach.scanned >= filter.scanLimit;
  return {
    jobs,
    nextBeforeId: stopped ? reach.lowest_id : null,
    complete: !stopped,
  };
}

async function readJobSummaries(db: Queryable, ids: readonly string[]): Promise<JobSummary[]> {
  const { rows } = await runSql<Parameters<typeof toJob>[0]>(db, selectJobSummaries(ids));
  return rows.map((row) => {
    const { payload: _payload, errors: _errors, ...summary } = toJob(row);
    return summary;
  });
}

/** The ids of the jobs holding idempotency key `key`, in any queue, newest first. */
export async function findJobsByKey(db: Queryable, key: string): Promise<string[]> {
  // No job holds a key that is not storable text (NUL), which PostgreSQL would refuse to compare.
  if (typeof key !== 'string' || key.length === 0 || key.length > 512 || key.includes('\u0000')) {
    return [];
  }
  const { rows } = await runSql<{ id: string }>(db, selectJobIdsByKey(key, 1_000));
  return rows.map((r) => r.id);
}

const MAX_BULK_IDS = 1_000;

function checkIds(ids: readonly string[]): string[] {
  if (!Array.isArray(ids)) {
    throw new SkiplockError('invalid_ids', `job ids must be an array, not ${typeof ids}`);
  }
  if (ids.length > MAX_BULK_IDS) {
    throw new SkiplockError('invalid_ids', `at most ${MAX_BULK_IDS} job ids at a time`);
  }
  return ids.map((id) => checkJobId(id, 'each id'));
}

export interface DeadJobsActionOptions {
  /** Leaves out jobs whose type starts with this: a package's own jobs (a saga's steps). */
  exceptTypePrefix?: string | undefined;
}

export interface RetryDeadJobsOptions extends DeadJobsActionOptions {
  /** Where a failed admission after the retry is logged (`admit_after_failed`). */
  logger?: Logger | undefined;
}

/**
 * Runs the listed jobs that are dead again now, with fresh attempts (others are left alone, and
 * so is one another transaction holds: skipped, never waited for);
 * jobs with a concurrency key wait for a slot of their key and are admitted here. Returns the
 * ids retried. On a pool, not in a caller's transaction: the retry commits first, so an
 * admission that fails after it (a lock wait past `statement_timeout`) is logged and the ids are
 * still returned; workers' admission passes admit the keys, as after `client.retryJob`.
 */
export async function retryDeadJobs(
  pool: pg.Pool,
  ids: readonly string[],
  options: RetryDeadJobsOptions = {},
): Promise<string[]> {
  if (checkIds(ids).length === 0) return [];
  const { rows } = await runSql<{ id: string; concurrency_key: string | null }>(
    pool,
    retryDeadJobsSql(ids, options.exceptTypePrefix ?? null),
  );
  const keys = [...new Set(rows.map((r) => r.concurrency_key).filter((k) => k !== null))];
  if (keys.length > 0) {
    try {
      await runSql(
        pool,
        admitKeys({ keys, wait: true, maxKeys: keys.length, afterKey: null, lease: null }),
      );
    } catch (error) {
      (options.logger ?? createDefaultLogger()).warn(
        {
          reason: 'admit_after_failed',
          jobIds: rows.map((r) => r.id),
          err: errorMessage(error),
        },
        "could not admit the retried jobs' concurrency keys; workers' admission passes will",
      );
    }
  }
  return rows.map((r) => r.id);
}

/**
 * Deletes the listed jobs that are dead (others are left alone, and so is one another transaction
 * holds: skipped, never waited for); returns the ids deleted.
 */
export async function discardDeadJobs(
  db: Queryable,
  ids: readonly string[],
  options: DeadJobsActionOptions = {},
): Promise<string[]> {
  if (checkIds(ids).length === 0) return [];
  const { rows } = await runSql<{ id: string }>(
    db,
    deleteDeadJobs(ids, options.exceptTypePrefix ?? null),
  );
  return rows.map((r) => r.id);
}
