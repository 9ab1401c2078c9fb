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
import { runSql, type Queryable } from './db.js';
import type { JobStatus } from './schema.js';
import { cancelUnlockedJob, selectJobStatuses, type JobStatusRow } from './sql/admin.js';
import { tryTransactionLock, type LockKey } from './sql/lock.js';

export { runSql, withTransaction, type Queryable } from './db.js';
export type { DeadJobInfo } from './define.js';
export type { DeadReason } from './retry/policy.js';
export { errorMessage } from './errors.js';
export { createDefaultLogger } from './logger.js';
export { queueMigrations, type MigrationSet } from './migrate.js';
export { resolvePool, type OwnedPool, type PoolSource } from './pool.js';
export { LockKeys, type LockKey } from './sql/lock.js';
export { IntervalService } from './service.js';
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
}

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
  return new Map(rows.map((r) => [r.id, { status: r.status, lastError: r.last_error }]));
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
