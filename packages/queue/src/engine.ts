/**
 * `@skiplock/queue/engine`: the queue's entry point for packages built on it (`@skiplock/saga`,
 * `@skiplock/cli`). Whatever such a package does to the queue's tables goes through a function
 * here, so none of them writes SQL against `skiplock.jobs` or spells its status words, and the
 * queue can change its table without breaking them. It also shares the queue's pool, logger,
 * error text and advisory-lock namespace, so a package on top does not keep copies of its own.
 *
 * Not for applications: it is versioned with the queue but carries no compatibility promise of
 * its own. Applications use the package's main entry.
 */
import type { Client } from './client.js';
import { sql, type SQL } from 'drizzle-orm';
import { renderSql, runSql, type Queryable } from './db.js';
import { HANDED_OFF_JOB_ID } from './sql/enqueue.js';
import type { AnyJobDefinition, DeadJobInfo, JobContext } from './define.js';
import {
  CARRIED,
  ENQUEUE_LEASED,
  HAND_OFF,
  handOffSlotOf,
  LOCAL_HAND_OFF,
  promisedBy,
  type HandOffSlot,
  type LeasedInsert,
  type LocalSlot,
} from './handoff.js';
import type { Worker } from './worker.js';
import type { JobStatus } from './schema.js';
import {
  cancelUnlockedJob,
  selectJobStatuses,
  selectJobStatusesByKey,
  type JobStatusRow,
  type KeyedJobStatusRow,
} from './sql/admin.js';
import { tryTransactionLock, type LockKey } from './sql/lock.js';

export {
  runSql,
  sendOpening,
  withSnapshot,
  withTransaction,
  type Opening,
  type Queryable,
  type QueryOutcome,
  type Statement,
} from './db.js';
export { completeWithStatement } from './complete-with-statement.js';
export { lockWaitOf } from './client.js';
export {
  namedStatement,
  preparedRunner,
  withOwnTransaction,
  type StatementRunner,
} from './prepared.js';
export type { DeadJobInfo } from './define.js';
export type { DeadReason } from './retry/policy.js';
export { errorMessage, loggedAs, storableText } from './errors.js';
export { createDefaultLogger } from './logger.js';
export { queueMigrations, type MigrationSet } from './migrate.js';
export { resolvePool, type OwnedPool, type PoolSource } from './pool.js';
export {
  grantsOnTable,
  queueGrants,
  bookkeepingGrants,
  roleIdentifiers,
  type RoleNames,
} from './roles.js';
export { LockKeys, type LockKey } from './sql/lock.js';
export { isRowId } from './row-id.js';
export { MAX_NAME_LENGTH } from './config.js';
export { IntervalService } from './service.js';
// The queue's copy of prom-client, for the metrics of packages built on it (they register theirs
// in the registry the application gives, beside the queue's).
export { Counter, Gauge, Histogram, Registry } from 'prom-client';
export { isRegistry, reuse } from './metrics.js';
export { commitItem } from './sql/commit.js';
export { claimedSince } from './sql/fence.js';
export { Listener, type ListenerOptions } from './listener.js';
export { retryDelayMs, sleep, withJitter } from './timers.js';
export { asStored, findJsonProblem, type JsonProblem } from './json-safe.js';
// OpenTelemetry helpers, so a package on top stores and reads span contexts as the queue does.
export {
  contextOf,
  detached,
  failSpan,
  inSpan,
  resolveTracer,
  spanContextOf,
  storedTrace,
  type StoredTrace,
} from './tracing.js';
export { findSchemaJsonProblem } from './schema-json.js';
// Bounded operator reads and bulk actions on dead jobs, for the dashboard.
export {
  browseJobs,
  discardDeadJobs,
  findJobsByKey,
  readQueueOverview,
  readRecentWorkers,
  readThroughput,
  retryDeadJobs,
  type BrowseOptions,
  type BrowsePage,
  type JobSummary,
  type OverviewOptions,
  type QueueCounts,
  type QueueOverview,
  type RecentWorker,
  type RetryDeadJobsOptions,
  type Throughput,
} from './overview.js';
/** The job status enum, for tools that list or filter by status (the CLI). */
export { jobStatus } from './schema.js';

/**
 * Cancels a queued job (pending, or waiting for its retry) unless a transaction holds its row,
 * in the caller's transaction; true when it was cancelled. A held row counts as running: call
 * this while holding a lock that the job's own settle takes after the job's row (the saga's
 * cancel holds the saga's row, which a step's completion locks after its job's), where waiting
 * would deadlock.
 */
export async function cancelQueuedJob(tx: Queryable, jobId: string): Promise<boolean> {
  return (await runSql(tx, cancelUnlockedJob(jobId))).rowCount === 1;
}

/** What `jobStates` reports of one job. */
export interface JobState {
  status: JobStatus;
  /** The last failed attempt's message, or why the job went dead. */
  lastError: string | null;
  /** Attempts started so far (the one running included). */
  attempts: number;
  /** When the current or last attempt was claimed; null before the first. */
  lockedAt: Date | null;
  /** Its run time has come (`run_at` at or before the database's clock as it was read). */
  due: boolean;
  /**
   * Cancelled while it ran (`cancelJob(id, { running: true })`) and its handler has not returned:
   * the run keeps its lease until then, so whatever the job's end sets off should wait for it.
   */
  stopping: boolean;
}

const toJobState = (r: JobStatusRow): JobState => ({
  status: r.status,
  lastError: r.last_error,
  attempts: r.attempts,
  lockedAt: r.locked_at,
  due: r.due,
  stopping: r.stopping,
});

/**
 * The current status of each listed job, by id, read in one statement. A job that no longer exists
 * (deleted by hand, or pruned by retention after it finished) has no entry.
 */
export async function jobStates(
  tx: Queryable,
  jobIds: readonly string[],
): Promise<Map<string, JobState>> {
  if (jobIds.length === 0) return new Map();
  const { rows } = await runSql<JobStatusRow>(tx, selectJobStatuses(jobIds));
  return new Map(rows.map((r) => [r.id, toJobState(r)]));
}

/**
 * The state of the job holding each idempotency key in its queue, keyed `<queue>\0<key>`, read
 * in one statement (the unique index on queue and key answers each). A key no job holds has no
 * entry.
 */
export async function jobStatesByKey(
  tx: Queryable,
  pairs: readonly { queue: string; key: string }[],
): Promise<Map<string, JobState & { id: string }>> {
  if (pairs.length === 0) return new Map();
  const { rows } = await runSql<KeyedJobStatusRow>(tx, selectJobStatusesByKey(pairs));
  return new Map(
    rows.map((r) => [`${r.queue}\0${r.idempotency_key}`, { id: r.id, ...toJobState(r) }]),
  );
}

/**
 * Takes the transaction-scoped advisory lock `key` of skiplock's namespace without waiting; true
 * when this transaction now holds it (it is released at commit or rollback). For singleton passes
 * that run on every host but one at a time: the sweeper, retention, the saga's reconciler.
 */
export async function tryAdvisoryLock(tx: Queryable, key: LockKey): Promise<boolean> {
  const { rows } = await runSql<{ locked: boolean }>(tx, tryTransactionLock(key));
  return rows[0]?.locked === true;
}

/**
 * What the transaction that handed this job off passed along (`carry` of `enqueueHandedOff`), in
 * the run that hand-off started; undefined in any other run of the job.
 */
export function handedOffCarry(ctx: JobContext): unknown {
  return (ctx as { [CARRIED]?: unknown })[CARRIED];
}

/**
 * A hand-off into `worker` for a transaction of the same process that is not one of its jobs':
 * pass it to `enqueueHandedOff` as the context, call `committed()` once the transaction committed
 * (the jobs it handed off start then) and `close()` when it ended either way (after a rollback;
 * `committed()` closes too). A job goes to the worker only into a free slot that buffered jobs
 * and other hand-offs have not been promised, so a busy worker does not gather work other
 * workers could start; otherwise it is enqueued like any job.
 */
export interface LocalHandOff {
  readonly [HAND_OFF]: HandOffSlot;
  /** Forget what an earlier try of the transaction handed off: its rows were rolled back. */
  retry(): void;
  committed(): void;
  close(): void;
}

/** Whether `value` is a worker made by `createWorker`, one that can lend slots (`LOCAL_HAND_OFF`). */
export function lendsSlots(value: unknown): value is Worker {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { [LOCAL_HAND_OFF]?: unknown })[LOCAL_HAND_OFF] === 'function'
  );
}

/** See `LocalHandOff`; null when `worker` is not running or hands off nothing (`maxHandOffs: 0`). */
export function openLocalHandOff(worker: Worker): LocalHandOff | null {
  const lend = (worker as { [LOCAL_HAND_OFF]?: () => LocalSlot | null })[LOCAL_HAND_OFF];
  const lent = lend?.();
  if (!lent) return null;
  return {
    [HAND_OFF]: lent.slot,
    retry: () => {
      lent.slot.pending = [];
    },
    committed: lent.committed,
    close: lent.close,
  };
}

/** What `enqueueHandedOff` did. */
export interface HandOffResult {
  id: string;
  /** False when a job with the idempotency key already existed; `id` is then that job's. */
  inserted: boolean;
  /** True when the job was inserted leased to the running job's worker, which runs it next. */
  handedOff: boolean;
  /** True when `then` ran with the new job's id, in the insert's statement. */
  followed: boolean;
}

/**
 * Enqueues the successor of the running job `ctx` in the transaction `tx` of its
 * `ctx.completeWith`, or of a dead job in its `onDead` hook's transaction (`ctx` is then the
 * hook's `DeadJobInfo`; only the worker that ran the job can hand off, not the sweeper), or a job
 * of a transaction a local worker lent a slot to (`ctx` is then its `LocalHandOff`). When the
 * worker can take it (it runs that type and queue, is started, has room, and the chain of
 * hand-offs is shorter than its `maxHandOffs`), the job is inserted already claimed by that
 * worker, which starts it as soon as `tx` commits, without a NOTIFY, a poll or a claim;
 * otherwise, or with `delayMs`, or for a type with a concurrency, rate or singleton key, it is
 * enqueued like any job. Either way it is one row with its key, its lease and its fencing: a
 * worker that dies before it ran leaves an ordinary expired lease for the sweeper.
 */
export async function enqueueHandedOff(
  client: Client,
  tx: Queryable,
  ctx: JobContext | DeadJobInfo | LocalHandOff,
  definition: AnyJobDefinition,
  payload: unknown,
  options: {
    idempotencyKey?: string | undefined;
    delayMs?: number | undefined;
    /**
     * A value the successor's run finds through `handedOffCarry` when it was handed off (and not
     * otherwise: a run after a claim, a retry or a crash has none), such as what the successor
     * would read first, known here already. Kept in this worker's memory until the run starts.
     */
    carry?: unknown;
    /**
     * Statements of the caller's to run in the insert's own statement when the job is handed
     * off, given the new job's id as an SQL expression (NULL when the key was taken: each must
     * then change nothing), each a data-modifying statement with no `$` in its text but its
     * parameters: one round trip where the caller would send another with the id it got back.
     * `followed` in the result says whether they ran with the id; if not, send them yourself.
     */
    then?: (jobId: SQL) => SQL[];
  } = {},
): Promise<HandOffResult> {
  const { carry, then, ...insert } = options;
  const slot = handOffSlotOf(ctx);
  const insertLeased = (client as { [ENQUEUE_LEASED]?: LeasedInsert })[ENQUEUE_LEASED];
  if (
    !slot?.open ||
    !insertLeased ||
    insert.delayMs !== undefined ||
    slot.depth >= slot.limit ||
    ((promisedBy(slot) > 0 || slot.firstNeedsRoom === true) && promisedBy(slot) >= slot.room()) ||
    !slot.accepts(definition.type, definition.queue) ||
    // A job with a concurrency key, a rate limit or a singleton key goes through admission or
    // its unique index: inserted already running, it would skip both.
    definition.concurrencyKey !== null ||
    definition.singletonKey !== null
  ) {
    const { id, inserted } = await client.enqueue(definition, payload, { ...insert, tx });
    return { id, inserted, handedOff: false, followed: false };
  }
  const parts = then?.(sql.raw(HANDED_OFF_JOB_ID)).map(renderSql) ?? [];
  // Held from the room check on, through the insert's round trip: concurrent transactions
  // (parallel starts) must not all be promised the same free slot.
  slot.inserting += 1;
  const leasedAt = performance.now();
  let result: Awaited<ReturnType<LeasedInsert>>;
  try {
    result = await insertLeased(definition, payload, insert, tx, slot.workerId, parts);
  } finally {
    slot.inserting -= 1;
  }
  if (!result.claimed) {
    return { id: result.id, inserted: result.inserted, handedOff: false, followed: false };
  }
  slot.pending.push({ row: result.claimed, carry, leasedAt });
  return { id: result.id, inserted: true, handedOff: true, followed: parts.length > 0 };
}
