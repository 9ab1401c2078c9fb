import type pg from 'pg';
import { runSql, withTransaction } from './db.js';
import type { AnyJobDefinition, JobContext, JobInfo } from './define.js';
import { payloadIssues } from './define.js';
import {
  InvalidPayloadError,
  JobTimeoutError,
  LockLostError,
  ShutdownError,
  UnknownJobTypeError,
  errorMessage,
} from './errors.js';
import type { SafeEmitter, WorkerEvents } from './events.js';
import type { LeaseHolder } from './heartbeat.js';
import type { Logger } from './logger.js';
import type { Metrics } from './metrics.js';
import type { Completer } from './completer.js';
import { decideFailure, type FailureDecision } from './retry/policy.js';
import { defaultBackoff } from './retry/backoff.js';
import type { ClaimedRow } from './sql/claim.js';
import { extendLease } from './sql/heartbeat.js';
import { completeJobs, failJob, releaseJobs, type LockToken } from './sql/settle.js';
import { retryDelayMs, sleep } from './timers.js';

/** A claimed job from claim to settle; the heartbeat sees it as a lease holder. */
export class RunningJob implements LeaseHolder {
  readonly token: LockToken;
  readonly info: JobInfo;
  readonly controller = new AbortController();
  leaseMs: number;
  renewedAt = performance.now();
  /** queued: claimed, waiting in the worker's local buffer; running: handler executing. */
  state: 'queued' | 'running' | 'settling' | 'done' = 'queued';
  settledExplicitly = false;

  constructor(readonly row: ClaimedRow) {
    this.token = { id: row.id, attempt: row.attempts };
    this.leaseMs = row.lease_ms;
    this.info = {
      id: row.id,
      type: row.job_type,
      queue: row.queue,
      attempt: row.attempts,
      maxAttempts: row.max_attempts,
      priority: row.priority,
      idempotencyKey: row.idempotency_key,
    };
  }

  /** Whether the lease must be kept alive: the job is buffered or its handler runs. */
  isRunning(): boolean {
    return this.state === 'queued' || this.state === 'running';
  }

  abort(reason: Error): void {
    if (!this.controller.signal.aborted) this.controller.abort(reason);
  }
}

export interface ExecutorDeps {
  pool: pg.Pool;
  workerId: string;
  definitions: ReadonlyMap<string, AnyJobDefinition>;
  completer: Completer;
  logger: Logger;
  metrics: Metrics;
  events: SafeEmitter<WorkerEvents>;
  /** Attempts at writing a settle before leaving the job to the sweeper. */
  settleAttempts: number;
  /** Called when the handler has finished (before the settle write), freeing its slot. */
  handlerDone(job: RunningJob, durationMs: number): void;
}

type Outcome =
  | { kind: 'success' }
  | { kind: 'failure'; decision: FailureDecision; error: unknown }
  | { kind: 'lock_lost' }
  | { kind: 'shutdown' };

/** Runs one claimed job to its settle. Never throws: every outcome is written or logged. */
export async function executeJob(d: ExecutorDeps, job: RunningJob): Promise<void> {
  const fields = logFields(job);
  const started = performance.now();
  job.state = 'running';
  const outcome = await run(d, job);
  job.state = 'settling';
  d.handlerDone(job, performance.now() - started);
  try {
    await settle(d, job, outcome, performance.now() - started);
  } catch (error) {
    // The job stays processing under its lease; the sweeper will take it back.
    d.metrics.inc('settle_failed_total');
    d.logger.error(
      { ...fields, reason: 'settle_failed', err: errorMessage(error) },
      'could not settle job',
    );
    d.events.emit('worker:error', { reason: 'settle_failed', error });
  } finally {
    job.state = 'done';
  }
}

async function run(d: ExecutorDeps, job: RunningJob): Promise<Outcome> {
  const definition = d.definitions.get(job.info.type);
  const nonFatal = (reason: 'unknown_type' | 'invalid_payload', error: Error): Outcome => ({
    kind: 'failure',
    error,
    decision: { kind: 'dead', reason, attemptReason: 'error' },
  });
  if (!definition) return nonFatal('unknown_type', new UnknownJobTypeError(job.info.type));
  const parsed = definition.payload.safeParse(job.row.payload);
  if (!parsed.success) {
    return nonFatal(
      'invalid_payload',
      new InvalidPayloadError(job.info.type, payloadIssues(parsed.error)),
    );
  }
  const signal = job.controller.signal;
  // Lost or released while it waited in the local buffer: the handler must not start at all.
  if (signal.aborted) return abortedOutcome(signal.reason) ?? { kind: 'lock_lost' };
  const timeoutMs = job.row.timeout_ms ?? definition.timeoutMs;
  const timer =
    timeoutMs === null
      ? null
      : setTimeout(() => job.abort(new JobTimeoutError(timeoutMs)), timeoutMs);
  // Built on first use: most handlers never log, and a child logger per job shows in profiles.
  let logger: Logger | undefined;
  const ctx: JobContext = {
    job: job.info,
    signal,
    get logger() {
      return (logger ??= d.logger.child({
        jobId: job.info.id,
        jobType: job.info.type,
        attempt: job.info.attempt,
      }));
    },
    idempotencyKey: job.info.idempotencyKey ?? `job:${job.info.id}`,
    extendLease: async (leaseMs = job.leaseMs) => {
      const { rowCount } = await runSql(d.pool, extendLease(d.workerId, job.token, leaseMs));
      if (rowCount === 1) {
        job.renewedAt = performance.now();
        job.leaseMs = Math.max(job.leaseMs, leaseMs);
        return true;
      }
      job.abort(new LockLostError(job.info.id));
      return false;
    },
    completeWith: async (work) => {
      if (signal.aborted) throw signal.reason;
      const value = await withTransaction(d.pool, async (tx) => {
        const { rowCount } = await runSql(tx, completeJobs(d.workerId, [job.token]));
        if (rowCount !== 1) throw new LockLostError(job.info.id);
        return work(tx);
      });
      job.settledExplicitly = true;
      return value;
    },
  };
  const aborted = new Promise<never>((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  });
  aborted.catch(() => {});
  try {
    // A handler that ignores its signal cannot hold the attempt past the timeout: the race ends it.
    await Promise.race([
      Promise.resolve().then(() => definition.handler(parsed.data, ctx)),
      aborted,
    ]);
    return { kind: 'success' };
  } catch (error) {
    const reason: unknown = signal.aborted ? signal.reason : error;
    if (job.settledExplicitly) return { kind: 'success' };
    const aborted = abortedOutcome(reason);
    if (aborted) return aborted;
    const attemptReason = reason instanceof JobTimeoutError ? 'timeout' : 'error';
    return {
      kind: 'failure',
      error: reason,
      decision: decideFailure({
        attempt: job.info.attempt,
        maxAttempts: job.info.maxAttempts,
        reason: attemptReason,
        error: reason,
        backoff: definition.backoff ?? defaultBackoff,
        nonRetryable: definition.nonRetryable,
      }),
    };
  } finally {
    if (timer) clearTimeout(timer);
  }
}

function abortedOutcome(reason: unknown): Outcome | null {
  if (reason instanceof LockLostError) return { kind: 'lock_lost' };
  if (reason instanceof ShutdownError) return { kind: 'shutdown' };
  return null;
}

async function settle(d: ExecutorDeps, job: RunningJob, outcome: Outcome, durationMs: number) {
  const fields = logFields(job);
  const event = {
    jobId: job.info.id,
    jobType: job.info.type,
    queue: job.info.queue,
    attempt: job.info.attempt,
  };
  const lockLost = () => {
    d.metrics.inc('jobs_lock_lost_total');
    d.logger.warn({ ...fields, reason: 'lock_lost' }, 'job no longer owned; result discarded');
    d.events.emit('job:lock_lost', event);
  };
  switch (outcome.kind) {
    case 'lock_lost':
      return lockLost();
    case 'shutdown': {
      const released = await withRetry(d, () =>
        runSql(d.pool, releaseJobs(d.workerId, [job.token])),
      );
      if (released.rowCount === 0) return lockLost();
      d.metrics.inc('jobs_released_total');
      d.logger.info({ ...fields, reason: 'shutdown' }, 'job released on shutdown');
      d.events.emit('job:released', event);
      return;
    }
    case 'success': {
      d.metrics.inc('job_duration_ms_sum', durationMs);
      d.metrics.inc('job_duration_ms_count');
      if (!job.settledExplicitly) {
        const owned = await withRetry(d, () => d.completer.complete(job.token));
        if (!owned) return lockLost();
      }
      d.metrics.inc('jobs_completed_total');
      d.events.emit('job:completed', { ...event, durationMs });
      return;
    }
    case 'failure':
      return settleFailure(d, job, outcome.decision, outcome.error, lockLost);
  }
}

async function settleFailure(
  d: ExecutorDeps,
  job: RunningJob,
  decision: FailureDecision,
  error: unknown,
  lockLost: () => void,
) {
  const fields = logFields(job);
  const event = {
    jobId: job.info.id,
    jobType: job.info.type,
    queue: job.info.queue,
    attempt: job.info.attempt,
  };
  const message = errorMessage(error);
  if (decision.kind === 'retry') {
    const { rowCount } = await withRetry(d, () =>
      runSql(
        d.pool,
        failJob({
          workerId: d.workerId,
          token: job.token,
          status: 'failed',
          delayMs: decision.delayMs,
          reason: decision.reason,
          message,
        }),
      ),
    );
    if (rowCount === 0) return lockLost();
    d.metrics.inc(`jobs_retried_total{reason="${decision.reason}"}`);
    d.logger.info(
      { ...fields, reason: decision.reason, delayMs: decision.delayMs, err: message },
      'attempt failed; retry scheduled',
    );
    d.events.emit('job:retry', { ...event, reason: decision.reason, delayMs: decision.delayMs });
    return;
  }
  const definition = d.definitions.get(job.info.type);
  const write = failJob({
    workerId: d.workerId,
    token: job.token,
    status: 'dead',
    delayMs: 0,
    reason: decision.reason === 'max_attempts' ? decision.attemptReason : decision.reason,
    message: decision.reason === 'max_attempts' ? message : `${decision.reason}: ${message}`,
  });
  const owned = await withRetry(d, async () => {
    if (!definition?.onDead) return (await runSql(d.pool, write)).rowCount === 1;
    return withTransaction(d.pool, async (tx) => {
      if ((await runSql(tx, write)).rowCount !== 1) return false;
      await definition.onDead!(tx, { ...job.info, reason: decision.reason, error: message });
      return true;
    });
  });
  if (!owned) return lockLost();
  d.metrics.inc(`jobs_dead_total{reason="${decision.reason}"}`);
  d.logger.warn({ ...fields, reason: decision.reason, err: message }, 'job is dead');
  d.events.emit('job:dead', { ...event, reason: decision.reason });
}

/** Retries a settle write through connection faults, a bounded number of times. */
async function withRetry<T>(d: ExecutorDeps, write: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (error) {
      if (attempt >= d.settleAttempts || error instanceof LockLostError) throw error;
      d.logger.warn(
        { reason: 'db_error', attempt, err: errorMessage(error) },
        'settle write failed; retrying',
      );
      await sleep(retryDelayMs(attempt));
    }
  }
}

function logFields(job: RunningJob) {
  return {
    jobId: job.info.id,
    jobType: job.info.type,
    queue: job.info.queue,
    attempt: job.info.attempt,
  };
}
