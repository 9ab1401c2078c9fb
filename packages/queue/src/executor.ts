import { context, type Context, type Span, type Tracer } from '@opentelemetry/api';
import type pg from 'pg';
import { MAX_LEASE_MS } from './config.js';
import {
  runSql,
  withTransaction,
  type QueryOutcome,
  type Statement,
  type TransactionAbort,
} from './db.js';
import { COMPLETE_WITH_STATEMENT, type CompleteWithStatement } from './complete-with-statement.js';
import { namedStatement, withOwnTransaction, type StatementRunner } from './prepared.js';
import type { AnyJobDefinition, DeadJobInfo, JobContext, JobInfo } from './define.js';
import {
  ConfigError,
  InvalidPayloadError,
  JobTimeoutError,
  LockLostError,
  ShutdownError,
  SkiplockError,
  UnknownJobTypeError,
  errorMessage,
  loggableMessage,
} from './errors.js';
import type { LockLostEvent, SafeEmitter, WorkerEvents } from './events.js';
import { leaseRenewed, type LeaseHolder } from './heartbeat.js';
import type { Logger } from './logger.js';
import type { JobOutcome, QueueMetrics } from './metrics.js';
import type { JobSeriesCache } from './job-series.js';
import type { Completer } from './completer.js';
import { failureRecord, markDead } from './dead.js';
import { CARRIED, HAND_OFF, type HandedOff, type HandOffSlot } from './handoff.js';
import { decideFailure, type FailureDecision } from './retry/policy.js';
import { computeBackoffMs, defaultBackoff, type BackoffOptions } from './retry/backoff.js';
import type { ClaimedRow } from './sql/claim.js';
import { extendLease } from './sql/heartbeat.js';
import { releaseStoppedRun } from './sql/admin.js';
import { selectJobHolder, type JobHolderRow } from './sql/fence.js';
import {
  completeJobs,
  failJob,
  handBackUnknownType,
  releaseJobs,
  unknownTypeHandBacks,
  type LockToken,
} from './sql/settle.js';
import { isThenable, issuesAt, runValidation } from './standard.js';
import { retryDelayMs, sleep } from './timers.js';
import { continuedContext, failSpan, startProcess } from './tracing.js';

/** A claimed job from claim to settle; the heartbeat sees it as a lease holder. */
export class RunningJob implements LeaseHolder, TransactionAbort {
  readonly token: LockToken;
  readonly info: JobInfo;
  leaseMs: number;
  /** What each renewal leases the row for: its own `lease_ms`, whatever `extendLease` did. */
  readonly renewMs: number;
  renewedAt = performance.now();
  /** queued: claimed, waiting in the worker's local buffer; running: handler executing. */
  state: 'queued' | 'running' | 'settling' | 'done' = 'queued';
  settledExplicitly = false;
  /**
   * Its `completeWith` COMMIT is in flight: the row may read completed before the answer comes.
   * A heartbeat that found it so took its lease for lost (`lock_lost`, the handler aborted) though
   * the job completed; now a renewal that misses the row does not (see `Heartbeat.beat`). The
   * job is still given up once not renewed for a whole lease: a COMMIT hung in a partition, whose
   * transaction the server ended, must not keep a job running that another worker took back
   * (found in review). Should COMMIT fail, the flag is cleared.
   */
  committing = false;
  /**
   * How many of its `completeWith` transactions are open (two overlap when a saga step's deadline
   * ends the step while its rolled-back transaction closes). The fence holds the row locked until
   * the transaction ends, so a lease renewal on another connection would wait for that lock while
   * the transaction waits for the handler (found by an audit: `ctx.extendLease` inside
   * `completeWith`'s work hung the job for good, the heartbeat reading the row locked and the
   * sweeper skipping it). The lock keeps the sweeper off the job meanwhile, so `extendLease` then
   * returns true without writing; should the fence not get the lock, nothing commits.
   */
  completing = 0;
  /** Settles when the handler has returned or thrown (at once for a handler never started). */
  handlerSettled: Promise<void> = Promise.resolve();
  /** True from an async handler's start until it has returned or thrown. */
  handlerRunning = false;
  /**
   * Its lock was lost to an operator's stop (`cancelled` at this attempt, its lease kept): the
   * lease as the stop left it (see `JobHolderRow.stopped_lease`), which the run holds, and its
   * slot with it, until the handler returns (see `releaseStopped`). Null otherwise.
   */
  stoppedLease: string | null = null;
  /** How many hand-offs in a row led to this job; 0 for a job the worker claimed. */
  handOffDepth = 0;
  /** A hand-back of this buffered job failed: it may have committed, so check before starting. */
  handBackFailed = false;
  /** What the transaction that handed this job off left it (see `HandedOff`); else undefined. */
  carry: unknown = undefined;
  /** When the worker took the row (a claim, an admission's lease, a hand-off). */
  readonly takenAt = performance.now();
  /**
   * The OpenTelemetry context the worker took the job in (its claim loop's, or a hand-off's): a
   * run with no context of its own runs in it, not in that of whatever started it.
   */
  readonly takenIn = context.active();
  /** Why the job was aborted (lock lost, timeout, shutdown); null while it may run on. */
  abortReason: Error | null = null;
  /** The run's consumer span (see tracing.ts); null when the worker does not trace. */
  span: Span | null = null;
  /** Set by the worker while the job waits in its buffer: starts it (true) or drops it (false). */
  turn: ((run: boolean) => void) | null = null;
  /** Called once on abort, while a handler runs: ends the race in `run`. */
  onAbort: ((reason: Error) => void) | null = null;
  /** Called once on abort, while completing transactions run: ends them (see `TransactionAbort`). */
  private transactionAborts: ((reason: Error) => void)[] | null = null;
  // An AbortSignal costs microseconds to build (it is an EventTarget), so the controller is made
  // only when a handler reads `ctx.signal`; most no-op and quick handlers never do.
  private controller: AbortController | null = null;

  constructor(readonly row: ClaimedRow) {
    this.token = { id: row.id, attempt: row.attempts };
    this.leaseMs = row.lease_ms;
    this.renewMs = row.lease_ms;
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

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.abortReason) this.controller.abort(this.abortReason);
    }
    return this.controller.signal;
  }

  /**
   * Whether the lease must be kept alive: the job is buffered or its handler runs, and no
   * `completeWith` completed it yet (a completed row is no longer leased: a heartbeat took its
   * absence for a lost lease and aborted the handler's work after the commit).
   */
  isRunning(): boolean {
    return !this.settledExplicitly && (this.state === 'queued' || this.state === 'running');
  }

  abort(reason: Error): void {
    if (this.abortReason) return;
    this.abortReason = reason;
    this.controller?.abort(reason);
    this.onAbort?.(reason);
    for (const end of this.transactionAborts?.splice(0) ?? []) end(reason);
  }

  /** `TransactionAbort`: the job's completing transactions end with its run. */
  onceAborted(listener: (reason: Error) => void): () => void {
    (this.transactionAborts ??= []).push(listener);
    return () => {
      const at = this.transactionAborts?.indexOf(listener) ?? -1;
      if (at >= 0) this.transactionAborts!.splice(at, 1);
    };
  }
}

export interface ExecutorDeps {
  pool: pg.Pool;
  workerId: string;
  definitions: ReadonlyMap<string, AnyJobDefinition>;
  completer: Completer;
  logger: Logger;
  metrics: QueueMetrics;
  /** The job metrics bound to each queue and job type (see job-series.ts). */
  series: JobSeriesCache;
  events: SafeEmitter<WorkerEvents>;
  /** Attempts at writing a settle before leaving the job to the sweeper. */
  settleAttempts: number;
  /** When and how often a job of a type with no definition here is tried (`settleUnknownType`). */
  unknownTypeRetry: { backoff: BackoffOptions; maxAttempts: number };
  /** Starts each run's consumer span; null with `tracing: false`. */
  tracer: Tracer | null;
  /** The worker's `asyncCommit`: bookkeeping commits skip the WAL flush wait. */
  asyncCommit: boolean;
  /** How the worker sends statements (named prepared ones unless turned off; see prepared.ts). */
  run: StatementRunner;
  /**
   * Called when the handler has finished (before the settle write), freeing its slot; for a
   * handler that outlives its attempt, when it returns.
   */
  handlerDone(job: RunningJob, durationMs: number): void;
  /** A job of this concurrency key settled: its slot is free for the key's next waiting job. */
  slotFreed(key: string): void;
  /**
   * Work a run left behind it (a stopped run's release once its overrunning handler returned),
   * which the worker's stop() waits for as it waits for runs.
   */
  track(task: Promise<void>): void;
  /** Hand-offs of successor jobs to this worker (see `HandOffSlot`); null: none. */
  handOff: {
    limit: number;
    accepts(jobType: string, queue: string): boolean;
    /** See `HandOffSlot.room`. */
    room(slot: HandOffSlot): number;
    /** A completing transaction that may hand off began (`opened`) or ended (`closed`). */
    opened(slot: HandOffSlot): void;
    closed(slot: HandOffSlot): void;
    /** Starts a job this worker inserted leased to itself, once its insert committed. */
    adopt(handed: HandedOff, depth: number): void;
  } | null;
}

type Outcome =
  | { kind: 'success' }
  | { kind: 'failure'; decision: FailureDecision; error: unknown }
  | { kind: 'lock_lost' }
  | { kind: 'shutdown' }
  /** No definition of its type here: handed back for a worker that has one (`settleUnknownType`). */
  | { kind: 'unknown_type' };

/**
 * Runs one claimed job to its settle. Never throws: every outcome is written or logged. With a
 * tracer, the run and its settle happen inside the run's consumer span, so what the handler and
 * the settle do (an enqueue, a dead job's hook) nests under it. Without one, a `continue` job
 * still runs in its enqueue's context (no span of its own), so its trace is not cut.
 */
export function executeJob(d: ExecutorDeps, job: RunningJob): Promise<void> {
  const active = d.tracer
    ? openSpan(d.tracer, d, job)
    : continuedContext(
        d.definitions.get(job.info.type)?.trace ?? 'link',
        job.row.trace_parent,
        job.row.trace_state,
      );
  if (active) return executeIn(active, d, job);
  // No context of its own: the span, if any, neither records nor carries a context, so ending it
  // is a no-op and the run needs no frame of its own. A job started as another one's slot freed
  // (from that job's continuation) would run in that job's context: run it in the one it was
  // taken in. With no SDK registered both are the root context and nothing is switched.
  if (context.active() !== job.takenIn) return context.with(job.takenIn, () => execute(d, job));
  return execute(d, job);
}

async function executeIn(active: Context, d: ExecutorDeps, job: RunningJob): Promise<void> {
  try {
    await context.with(active, () => execute(d, job));
  } finally {
    job.span?.end();
  }
}

async function execute(d: ExecutorDeps, job: RunningJob): Promise<void> {
  const started = performance.now();
  job.state = 'running';
  // The database's part (run_at to the claim, in its clock) and the time in the local buffer.
  d.series
    .of(job.info.queue, job.info.type)
    .lag.observe((job.row.lag_seconds ?? 0) + (started - job.takenAt) / 1000);
  const outcome = await run(d, job);
  if (outcome.kind === 'failure' && job.span) failSpan(job.span, outcome.error);
  job.state = 'settling';
  const durationMs = performance.now() - started;
  if (job.handlerRunning) {
    // The attempt ended (timeout, lost lock, shutdown) under a handler that ignores its signal.
    // Its slot stays taken until it returns: freed now, every timed-out attempt of a handler that
    // hangs would leave one more running, past `concurrency` and without bound. Buffered jobs do
    // not wait behind it for long (`maxPrefetchWaitMs`).
    d.logger.warn(
      { ...jobFields(job), reason: 'handler_overran' },
      'handler still running after its attempt ended; its slot stays taken until it returns',
    );
    // The slot's real time, which the prefetch's handler speed should see.
    void job.handlerSettled.then(() => d.handlerDone(job, performance.now() - started));
  } else {
    d.handlerDone(job, durationMs);
  }
  try {
    await settle(d, job, outcome, durationMs);
    // A settled (or released) job of a concurrency key gave its slot back: admit the key's next
    // job once this handler has returned. After a lost lock the admission is harmless: it counts
    // before admitting. A run an operator stopped gives its slot back only now, by clearing the
    // lease it kept (see `releaseStoppedRun`): as part of this run when its handler has returned
    // already (runOnce() and stop() wait for it), else once it does (neither waits for a handler
    // that overran: stop() waits for the release only if the handler returned before it ends).
    const key = job.row.concurrency_key;
    const lease = job.stoppedLease;
    if (lease !== null) {
      if (job.handlerRunning) {
        void job.handlerSettled.then(() => d.track(releaseStopped(d, job, lease)));
      } else {
        await releaseStopped(d, job, lease);
      }
    } else if (key !== null) void job.handlerSettled.then(() => d.slotFreed(key));
  } catch (error) {
    // The job stays processing under its lease; the sweeper will take it back.
    d.metrics.settleFailures.inc();
    d.logger.error(
      { ...jobFields(job), reason: 'settle_failed', err: errorMessage(error) },
      'could not settle job',
    );
    d.events.emit('worker:error', { reason: 'settle_failed', error });
    if (job.span) failSpan(job.span, error);
  } finally {
    job.state = 'done';
  }
}

/**
 * Starts the run's consumer span and returns the context to run in, or null when the span neither
 * records nor carries a context (no SDK, a job enqueued untraced): it would change nothing.
 */
function openSpan(tracer: Tracer, d: ExecutorDeps, job: RunningJob): Context | null {
  const mode = d.definitions.get(job.info.type)?.trace ?? 'link';
  const { span, context: active } = startProcess(
    tracer,
    {
      id: job.info.id,
      queue: job.info.queue,
      type: job.info.type,
      attempt: job.info.attempt,
      traceParent: job.row.trace_parent,
      traceState: job.row.trace_state,
    },
    mode,
  );
  job.span = span;
  return active;
}

/** The outcome of most runs, shared rather than made per job. */
const SUCCESS: Outcome = Object.freeze({ kind: 'success' });

async function run(d: ExecutorDeps, job: RunningJob): Promise<Outcome> {
  const definition = d.definitions.get(job.info.type);
  if (!definition) return UNKNOWN_TYPE;
  let timer: ReturnType<typeof setTimeout> | null = null;
  const startTimer = () => {
    const timeoutMs = job.row.timeout_ms ?? definition.timeoutMs;
    if (timeoutMs !== null) {
      timer = setTimeout(() => job.abort(new JobTimeoutError(timeoutMs)), timeoutMs);
    }
  };
  try {
    let validated = runValidation(definition.payload, job.row.payload);
    if (isThenable(validated)) {
      // A schema with async checks runs under the attempt's timeout and abort, like the handler.
      startTimer();
      validated = await raceAbort(job, validated);
    }
    if (validated.issues) {
      return deadOnArrival(
        'invalid_payload',
        new InvalidPayloadError(job.info.type, issuesAt('payload', validated.issues)),
      );
    }
    // A handed-off job's lease ran from its insert, and the transaction that inserted it may have
    // worked on for much of that lease before it committed (a `completeWith` callback that hands
    // off first and then does slow work): the sweeper could take the job back from under this
    // run before the next heartbeat. Renewed first, fenced, when half of the lease is gone; lost
    // already, it does not start. An error leaves it to the heartbeat, as before.
    if (job.handBackFailed) {
      // Its hand-back failed (see `releaseBuffered`), but may have committed before its answer
      // was lost: the row is then another worker's to claim. Renewed first, fenced; gone, or not
      // to be checked, it does not start. Before, it ran beside the worker that claimed it
      // (found by an audit).
      const held = await extendJobLease(d, job).catch(() => false);
      if (!held && !job.abortReason) job.abort(new LockLostError(job.info.id));
    } else if (job.handOffDepth > 0 && performance.now() - job.renewedAt > job.leaseMs / 2) {
      await extendJobLease(d, job).catch(() => false);
    }
    // Lost or released while it waited in the local buffer: the handler must not start at all.
    if (job.abortReason) return abortedOutcome(job.abortReason) ?? { kind: 'lock_lost' };
    if (timer === null) startTimer();
    const result = definition.handler(validated.value, new RunContext(d, job));
    if (isThenable(result)) {
      // Its concurrency slot is given back when the handler has really returned, even after a
      // timeout or a lost lock ended the attempt: until then it may still be running.
      job.handlerRunning = true;
      const returned = () => {
        job.handlerRunning = false;
      };
      job.handlerSettled = Promise.resolve(result).then(returned, returned);
      // A handler that ignores its signal cannot hold the attempt past the timeout: the race ends it.
      await raceAbort(job, result);
    }
    return SUCCESS;
  } catch (error) {
    // A handler's error, or a schema whose validation threw: the attempt failed.
    const reason: unknown = job.abortReason ?? error;
    if (job.settledExplicitly) return SUCCESS;
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
    job.onAbort = null;
    if (timer) clearTimeout(timer);
  }
}

/** Waits for `work` unless the job is aborted first (timeout, lost lock, shutdown). */
function raceAbort<T>(job: RunningJob, work: PromiseLike<T>): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    if (job.abortReason) return reject(job.abortReason);
    job.onAbort = reject;
    work.then(resolve, reject);
  });
}

function deadOnArrival(reason: 'invalid_payload', error: Error): Outcome {
  return { kind: 'failure', error, decision: { kind: 'dead', reason, attemptReason: 'error' } };
}

const UNKNOWN_TYPE: Outcome = Object.freeze({ kind: 'unknown_type' });

/** Where a handler's context keeps its run; a symbol keeps it out of logs, JSON and `Object.keys`. */
const RUN = Symbol('skiplock.run');

/**
 * The handler's context. Everything but `job` is a getter on the prototype, so that a run whose
 * handler reads nothing else costs one object: no AbortSignal, child logger, key string, closures
 * or hand-off slot until it is read. An object literal with getters and closures, as before, cost
 * about 3 µs of Node CPU per no-op job (about 12 %; 200,000 jobs at concurrency 10, three
 * alternating runs each; a micro-benchmark made such a literal 20 times slower than this class,
 * and defining the getters on each object 12 times). The methods are getters returning a function
 * bound to the run, so that a handler may destructure them. A copy made by spreading the context
 * has `job` only: see `JobContext`.
 */
class RunContext implements JobContext {
  readonly job: JobInfo;
  // Under a symbol, not `#` fields: a Proxy of the context, or an object made with it as its
  // prototype, still reaches the run through the getters.
  readonly [RUN]: { d: ExecutorDeps; run: RunningJob; logger?: Logger };
  /** The completing transaction's hand-off slot, made by the first `completeWith`. */
  declare [HAND_OFF]?: HandOffSlot;
  declare [CARRIED]?: unknown;

  constructor(d: ExecutorDeps, run: RunningJob) {
    this.job = run.info;
    this[RUN] = { d, run };
    if (run.carry !== undefined) this[CARRIED] = run.carry;
  }

  get signal(): AbortSignal {
    return this[RUN].run.signal;
  }

  get logger(): Logger {
    const r = this[RUN];
    return (r.logger ??= r.d.logger.child({
      jobId: this.job.id,
      jobType: this.job.type,
      attempt: this.job.attempt,
    }));
  }

  get idempotencyKey(): string {
    return this.job.idempotencyKey ?? `job:${this.job.id}`;
  }

  get extendLease(): JobContext['extendLease'] {
    const { d, run } = this[RUN];
    return (leaseMs) => extendJobLease(d, run, leaseMs);
  }

  get completeWith(): JobContext['completeWith'] {
    const { d, run } = this[RUN];
    return (work) => {
      const misuse = completeWithMisuse(run);
      if (misuse) return Promise.reject(misuse);
      return completeJobWith(d, run, handOffSlot(this, d, run), work);
    };
  }

  /** `completeWith` with a first statement in the fence's write (see `completeWithStatement`). */
  get [COMPLETE_WITH_STATEMENT](): CompleteWithStatement {
    const { d, run } = this[RUN];
    return (statement, work) =>
      completeJobWith(
        d,
        run,
        handOffSlot(this, d, run),
        (tx, first) => work(tx, first!),
        statement,
      );
  }
}

/**
 * Why a handler's `completeWith` call cannot run, or null. Called inside the work of an open one,
 * it waited for the job's row, which that transaction holds until the work returns: the attempt
 * hung until its timeout ("timed out", retried to `maxAttempts`); called after one committed, it
 * failed with `LockLostError` for a job that had completed (both found in an audit). Only the
 * handler's own calls are checked: the saga completes a step whose deadline ended it while the
 * step's rolled-back transaction is still closing (see `completing`), through
 * `COMPLETE_WITH_STATEMENT`.
 */
function completeWithMisuse(run: RunningJob): SkiplockError | null {
  if (run.settledExplicitly) {
    return new SkiplockError(
      'already_completed',
      `completeWith was called again after job ${run.info.id} was completed by an earlier one: it completes the job once per attempt`,
    );
  }
  if (run.completing > 0 && run.abortReason === null) {
    return new SkiplockError(
      'complete_with_open',
      `completeWith was called while another completeWith of job ${run.info.id} is open (inside its work?): run the statements on the tx that work is given`,
    );
  }
  return null;
}

/** The context's hand-off slot, made by its first `completeWith`; null when hand-offs are off. */
function handOffSlot(ctx: RunContext, d: ExecutorDeps, run: RunningJob): HandOffSlot | null {
  const handOff = d.handOff;
  if (!handOff) return null;
  const made = ctx[HAND_OFF];
  if (made) return made;
  const slot: HandOffSlot = {
    workerId: d.workerId,
    depth: run.handOffDepth,
    limit: handOff.limit,
    accepts: handOff.accepts,
    room: () => handOff.room(slot),
    open: false,
    pending: [],
    inserting: 0,
  };
  return (ctx[HAND_OFF] = slot);
}

async function extendJobLease(
  d: ExecutorDeps,
  job: RunningJob,
  leaseMs = job.renewMs,
): Promise<boolean> {
  if (!Number.isSafeInteger(leaseMs) || leaseMs < 1 || leaseMs > MAX_LEASE_MS) {
    throw new ConfigError(
      `extendLease: leaseMs must be an integer from 1 to ${MAX_LEASE_MS} (a day), not ${leaseMs}`,
    );
  }
  // Completed by completeWith: no lease is left to keep, and none was lost.
  if (job.settledExplicitly) return true;
  // Held by its open completing transaction: the row lock keeps the sweeper off it (see
  // `completing`), unless the attempt was ended meanwhile (its lease lost, its timeout).
  if (job.completing > 0) return job.abortReason === null;
  const sentAt = performance.now();
  const { rowCount } = await runSql(d.pool, extendLease(d.workerId, job.token, leaseMs));
  if (rowCount === 1) {
    leaseRenewed(job, sentAt, leaseMs);
    return true;
  }
  job.abort(new LockLostError(job.info.id));
  return false;
}

/** `completeWith`: the completing transaction, then the successors it handed to this worker. */
async function completeJobWith<T>(
  d: ExecutorDeps,
  job: RunningJob,
  slot: HandOffSlot | null,
  work: (tx: pg.PoolClient, followed: QueryOutcome<pg.QueryResultRow> | undefined) => Promise<T>,
  follow?: Statement,
): Promise<T> {
  if (job.abortReason) throw job.abortReason;
  const handOff = d.handOff;
  if (slot) {
    slot.open = true;
    slot.pending = [];
    handOff!.opened(slot);
  }
  job.completing += 1;
  try {
    const value = await completingTransaction(d, job, slot, work, follow);
    job.settledExplicitly = true;
    // Committed: the successors inserted leased to this worker exist now; run them here.
    // Taken out of the slot first, so that nothing adopted can be released below.
    for (const next of slot?.pending.splice(0) ?? []) {
      handOff!.adopt(next, job.handOffDepth + 1);
    }
    return value;
  } catch (error) {
    if (slot) await releaseUnadopted(d, slot.pending);
    throw error;
  } finally {
    job.completing -= 1;
    if (slot) {
      handOff!.closed(slot);
      slot.open = false;
      slot.pending = [];
    }
  }
}

/**
 * The completing transaction: the fenced completion, then `work` in the same transaction, run
 * again if a pooler lost a prepared statement (see `withOwnTransaction`) instead of failing the
 * attempt. `follow`: the caller's first statement, sent in the same write as BEGIN and the fence;
 * `work` gets its outcome. Should the fence find the lock lost, the transaction rolls back with
 * whatever `follow` did.
 */
function completingTransaction<T>(
  d: ExecutorDeps,
  job: RunningJob,
  slot: HandOffSlot | null,
  work: (tx: pg.PoolClient, followed: QueryOutcome<pg.QueryResultRow> | undefined) => Promise<T>,
  follow?: Statement,
): Promise<T> {
  return withOwnTransaction(
    d.pool,
    async (tx, opening) => {
      // Hand-offs inserted by a rolled-back try do not exist.
      if (slot) slot.pending = [];
      // BEGIN goes with the fence: one round trip per completing transaction fewer.
      const { rowCount, followed } = await d.run(
        tx,
        namedStatement('skiplock_complete', completeJobs(d.workerId, [job.token])),
        opening,
        false,
        follow,
      );
      if (rowCount !== 1) throw new LockLostError(job.info.id);
      return work(tx, followed);
    },
    // The attempt's timeout, lost lease or shutdown ends the transaction too: it holds the job's
    // row lock since the fence, so a `work` that never returned kept the settle, heartbeat and
    // sweeper off the job for good (found in review: a saga step's ctx.transaction callback
    // awaiting a call without a timeout, stuck past its 300 ms timeout and its lease).
    {
      opening: true,
      abort: job,
      committing: (inFlight) => {
        job.committing = inFlight;
      },
    },
  );
}

function abortedOutcome(reason: unknown): Outcome | null {
  if (reason instanceof LockLostError) return { kind: 'lock_lost' };
  if (reason instanceof ShutdownError) return { kind: 'shutdown' };
  return null;
}

/**
 * Counts how an attempt's settle ended (`reason`: the retry or dead reason code, `none` for a
 * completion or a lost lock) and how long its handler ran. Called before the outcome's event is
 * emitted, so a listener of the event sees it counted.
 */
function record(
  d: ExecutorDeps,
  job: RunningJob,
  durationMs: number,
  outcome: JobOutcome,
  reason: string,
): void {
  d.series.of(job.info.queue, job.info.type).settled(outcome, reason, durationMs / 1000);
  if (job.span?.isRecording()) {
    job.span.setAttributes({ 'skiplock.job.outcome': outcome, 'skiplock.job.reason': reason });
  }
}

async function settle(d: ExecutorDeps, job: RunningJob, outcome: Outcome, durationMs: number) {
  switch (outcome.kind) {
    case 'success': {
      if (!job.settledExplicitly) {
        // The completer tries its batch's write again itself (see Completer).
        const owned = await d.completer.complete(job.token);
        if (!owned) return lockLost(d, job, durationMs);
      }
      record(d, job, durationMs, 'completed', 'none');
      if (d.events.listening('job:completed')) {
        d.events.emit('job:completed', { ...jobFields(job), durationMs });
      }
      return;
    }
    case 'lock_lost':
      return lockLost(d, job, durationMs);
    case 'shutdown': {
      const released = await withRetry(d, () =>
        runSql(d.pool, releaseJobs(d.workerId, [job.token], d.asyncCommit)),
      );
      if (released.rowCount === 0) return lockLost(d, job, durationMs);
      record(d, job, durationMs, 'released', 'shutdown');
      d.logger.info({ ...jobFields(job), reason: 'shutdown' }, 'job released on shutdown');
      d.events.emit('job:released', jobFields(job));
      return;
    }
    case 'failure':
      return settleFailure(d, job, outcome.decision, outcome.error, durationMs);
    case 'unknown_type':
      return settleUnknownType(d, job, durationMs);
  }
}

/**
 * A job of a type this worker does not define (workers claim by queue: in a rolling deploy, one
 * of the old version meets the new version's types). Handed back with its attempt given back,
 * due again after the worker's `unknownTypeBackoff`, for a worker that defines it; at the
 * `unknownTypeMaxAttempts`-th such claim it goes dead as `unknown_type`, charged and without a
 * hook, as it did on the first before. Killing it at once failed a saga step of a new version
 * whenever a worker of the old one claimed it first, and charging each claim let a few claims
 * by old workers spend a step's 5 attempts. One primary-key read first (the count so far), on
 * this path only.
 */
async function settleUnknownType(d: ExecutorDeps, job: RunningJob, durationMs: number) {
  const error = new UnknownJobTypeError(job.info.type);
  const { backoff, maxAttempts } = d.unknownTypeRetry;
  const counted = await withRetry(d, () =>
    runSql<{ n: number }>(d.pool, unknownTypeHandBacks(job.token)),
  );
  const handedBack = counted.rows[0]?.n ?? 0;
  if (handedBack + 1 >= maxAttempts) {
    const dead = { kind: 'dead', reason: 'unknown_type', attemptReason: 'error' } as const;
    return settleFailure(d, job, dead, error, durationMs);
  }
  const delayMs = computeBackoffMs(handedBack + 1, backoff);
  const { rowCount } = await withRetry(d, () =>
    runSql(
      d.pool,
      handBackUnknownType({
        workerId: d.workerId,
        token: job.token,
        delayMs,
        message: errorMessage(error),
        handedBack: handedBack + 1,
      }),
    ),
  );
  if (rowCount === 0) return lockLost(d, job, durationMs);
  record(d, job, durationMs, 'released', 'unknown_type');
  d.logger.warn(
    { ...jobFields(job), reason: 'unknown_type_released', delayMs, handedBack: handedBack + 1 },
    'no definition of this job type in this worker; handed back for a worker that has one',
  );
  d.events.emit('job:released', jobFields(job));
}

/**
 * The attempt's own write found the job no longer its own, so its result is discarded and it is
 * never reported completed. The log line and event say which write won instead: the job's state
 * now (`retryable` from the sweeper, `processing` under a later attempt or another worker,
 * `completed`, `cancelled`, `dead`), or `current: null` when the row is gone. One read by primary
 * key, on this rare path only; if it fails, `current` is undefined and the loss is still reported.
 */
async function lockLost(d: ExecutorDeps, job: RunningJob, durationMs: number): Promise<void> {
  record(d, job, durationMs, 'lock_lost', 'none');
  let current: LockLostEvent['current'];
  try {
    const row = (await runSql<JobHolderRow>(d.pool, selectJobHolder(job.info.id))).rows[0];
    current = row ? { status: row.status, attempt: row.attempt, holder: row.holder } : null;
    // Stopped under this run (`cancelJob(id, { running: true })` kept its lease): the run holds
    // its slot until its handler returns. Anything else took the job from it for good; not
    // known, a lease it kept runs out.
    if (row?.status === 'cancelled' && row.attempt === job.token.attempt) {
      job.stoppedLease = row.stopped_lease;
    }
  } catch (error) {
    d.logger.debug({ ...jobFields(job), err: errorMessage(error) }, 'could not read the job back');
  }
  d.logger.warn(
    { ...jobFields(job), reason: 'lock_lost', current },
    'job no longer owned; result discarded',
  );
  d.events.emit('job:lock_lost', { ...jobFields(job), current });
}

/**
 * The handler of a run an operator stopped has returned: the lease it kept, and with it its
 * concurrency key's slot, is given back, and the key's next job admitted. Should that fail, the
 * slot is free once the lease runs out (within one `lease_ms`).
 */
async function releaseStopped(d: ExecutorDeps, job: RunningJob, lease: string): Promise<void> {
  // The worker stopped, and ended the pool it owns, before this overrunning handler returned:
  // nothing can be written (each try failed and was logged, for about 16 s); the lease runs out.
  if (d.pool.ended) return;
  try {
    const { rowCount } = await withRetry(d, () =>
      runSql(d.pool, releaseStoppedRun(d.workerId, job.token, lease)),
    );
    // Nothing given back (the lease ran out and retention or a retry moved the row on): the
    // slot was freed without this worker, and admission is not its to prompt.
    const key = job.row.concurrency_key;
    if (rowCount && key !== null) d.slotFreed(key);
  } catch (error) {
    d.logger.warn(
      { ...jobFields(job), reason: 'settle_failed', err: errorMessage(error) },
      "could not give back a stopped run's lease; its slot is free when the lease runs out",
    );
  }
}

async function settleFailure(
  d: ExecutorDeps,
  job: RunningJob,
  decision: FailureDecision,
  error: unknown,
  durationMs: number,
): Promise<void> {
  const fields = jobFields(job);
  const event = jobFields(job);
  const message = errorMessage(error);
  const logged = loggableMessage(error);
  const write = failJob({
    workerId: d.workerId,
    token: job.token,
    ...failureRecord(decision, message),
  });
  if (decision.kind === 'retry') {
    const { rowCount } = await withRetry(d, () => runSql(d.pool, write));
    if (rowCount === 0) return lockLost(d, job, durationMs);
    record(d, job, durationMs, 'retried', decision.reason);
    d.logger.info(
      { ...fields, reason: decision.reason, delayMs: decision.delayMs, err: logged },
      'attempt failed; retry scheduled',
    );
    d.events.emit('job:retry', { ...event, reason: decision.reason, delayMs: decision.delayMs });
    return;
  }
  const definition = d.definitions.get(job.info.type);
  // The hook's transaction may hand its successor (a saga's compensation) to this worker, as a
  // completing transaction does: it starts when the dead state commits, with no NOTIFY or claim.
  const slot = definition?.onDead ? deadSlot(d, job) : null;
  const info: DeadJobInfo & { [HAND_OFF]?: HandOffSlot } = {
    ...job.info,
    reason: decision.reason,
    error: message,
  };
  if (slot) info[HAND_OFF] = slot;
  let owned: boolean;
  // What earlier tries of the hook's transaction inserted leased to this worker: nothing after a
  // rollback, but a try whose COMMIT failed ambiguously may have committed it, and the next try
  // then finds the job dead already and hands off nothing. Released at the end (fenced, so a row
  // that does not exist changes nothing).
  const unadopted: HandedOff[] = [];
  if (slot) d.handOff!.opened(slot);
  try {
    owned = await withRetry(d, async () => {
      if (!definition?.onDead) return (await runSql(d.pool, write)).rowCount === 1;
      return withTransaction(d.pool, (tx) => {
        if (slot) unadopted.push(...slot.pending.splice(0));
        return markDead(tx, write, definition, info);
      });
    });
    if (slot && owned) {
      // Taken out of the slot first, so that nothing adopted can be released below.
      for (const handed of slot.pending.splice(0)) {
        d.handOff!.adopt(handed, job.handOffDepth + 1);
      }
    }
  } finally {
    if (slot) {
      unadopted.push(...slot.pending.splice(0));
      d.handOff!.closed(slot);
      slot.open = false;
    }
    await releaseUnadopted(d, unadopted);
  }
  if (!owned) return lockLost(d, job, durationMs);
  record(d, job, durationMs, 'dead', decision.reason);
  d.logger.warn({ ...fields, reason: decision.reason, err: logged }, 'job is dead');
  d.events.emit('job:dead', { ...event, reason: decision.reason });
}

/**
 * A buffered job that was not handed back with the rest (`releaseJobs` touches only `processing`
 * rows): if an operator stopped it while it waited (`cancelJob(id, { running: true })`), its row
 * kept the lease, and with it the slot of its concurrency key, for a handler that never started.
 * Given back now, fenced by the lease the stop left, as after a stopped run's handler returns.
 * Before, the slot stayed taken until the lease ran out (up to one `lease_ms`). One read by
 * primary key per such job, on this rare path only.
 */
export async function releaseStoppedUnstarted(d: ExecutorDeps, job: RunningJob): Promise<void> {
  if (d.pool.ended) return;
  let row: JobHolderRow | undefined;
  try {
    row = (await runSql<JobHolderRow>(d.pool, selectJobHolder(job.info.id))).rows[0];
  } catch (error) {
    d.logger.debug({ ...jobFields(job), err: errorMessage(error) }, 'could not read the job back');
    return;
  }
  if (row?.status !== 'cancelled' || row.attempt !== job.token.attempt) return;
  if (row.stopped_lease !== null) await releaseStopped(d, job, row.stopped_lease);
}

/**
 * Hands back to the queue the jobs a hand-off transaction inserted leased to this worker when that
 * transaction failed. After a rollback they do not exist and nothing changes; after an ambiguous
 * COMMIT (the connection lost once the server had committed) they do, leased to this worker and
 * never started, and would have waited for their leases to run out and the sweeper. Best effort:
 * when the database cannot be reached either, that is still what happens.
 */
export async function releaseUnadopted(
  d: Pick<ExecutorDeps, 'pool' | 'workerId' | 'asyncCommit' | 'logger'>,
  handed: readonly HandedOff[],
): Promise<void> {
  if (handed.length === 0) return;
  const tokens = handed.map(({ row }) => ({ id: row.id, attempt: row.attempts }));
  try {
    const { rows } = await runSql<{ id: string }>(
      d.pool,
      releaseJobs(d.workerId, tokens, d.asyncCommit),
    );
    for (const { id } of rows) {
      d.logger.warn(
        { reason: 'handoff_released', jobId: id },
        "a hand-off's transaction failed after committing; its job was handed back to the queue",
      );
    }
  } catch (error) {
    d.logger.warn(
      { reason: 'db_error', err: errorMessage(error) },
      'release of hand-offs failed; their leases will expire',
    );
  }
}

/**
 * The hand-off slot of a dead job's hook transaction. Its attempt is over and its slot counted
 * free (`handlerDone`; or still taken by a handler that outlived the attempt), where a buffered
 * job may already have started: so its room is the worker's free slots not yet promised, and
 * even its first hand-off needs one. Taken without room,
 * it waited at the front of the buffer behind whatever held the slots (a 3 s job held a saga's
 * compensation 3,007 ms while another worker idled); now it is enqueued for any worker instead.
 */
function deadSlot(d: ExecutorDeps, job: RunningJob): HandOffSlot | null {
  return d.handOff && slotWithoutJob(d.handOff, d.workerId, job.handOffDepth);
}

/**
 * An open hand-off slot whose transaction frees no job slot as it commits (a dead job's hook, or
 * a transaction the worker lent a slot to): its room is the worker's free slots not yet promised,
 * and even its first hand-off needs one.
 */
export function slotWithoutJob(
  handOff: NonNullable<ExecutorDeps['handOff']>,
  workerId: string,
  depth: number,
): HandOffSlot {
  const slot: HandOffSlot = {
    workerId,
    depth,
    limit: handOff.limit,
    accepts: handOff.accepts,
    room: () => handOff.room(slot) - 1,
    firstNeedsRoom: true,
    open: true,
    pending: [],
    inserting: 0,
  };
  return slot;
}

/** Retries a settle write through connection faults, a bounded number of times. */
async function withRetry<T>(d: ExecutorDeps, write: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (error) {
      // An ended pool (the worker stopped, and ended the pool it owns, while this write was in
      // flight) never takes another: retried, each try failed and warned for about 16 s.
      if (attempt >= d.settleAttempts || error instanceof LockLostError || d.pool.ended) {
        throw error;
      }
      d.logger.warn(
        { reason: 'db_error', attempt, err: errorMessage(error) },
        'settle write failed; retrying',
      );
      await sleep(retryDelayMs(attempt));
    }
  }
}

/** The job's identity, as log fields and as the payload of its events. */
function jobFields(job: RunningJob) {
  return {
    jobId: job.info.id,
    jobType: job.info.type,
    queue: job.info.queue,
    attempt: job.info.attempt,
  };
}
