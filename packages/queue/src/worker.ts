import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type pg from 'pg';
import { z } from 'zod';
import { backoffSchema, parseConfig, queueName, rejectUnknownKeys } from './config.js';
import { backoffWith } from './retry/backoff.js';
import { Completer } from './completer.js';
import { runSql } from './db.js';
import type { AnyJobDefinition } from './define.js';
import { ConfigError, LockLostError, ShutdownError, errorMessage } from './errors.js';
import { SafeEmitter, type WorkerEvents } from './events.js';
import {
  executeJob,
  releaseStoppedUnstarted,
  releaseUnadopted,
  RunningJob,
  slotWithoutJob,
  type ExecutorDeps,
} from './executor.js';
import { LOCAL_HAND_OFF, promisedBy, type HandOffSlot, type LocalSlot } from './handoff.js';
import { Heartbeat, type HeartbeatResult } from './heartbeat.js';
import { Listener } from './listener.js';
import { createDefaultLogger, type Logger } from './logger.js';
import { createJobGauges, type JobGauges, type JobGaugesOptions } from './gauges.js';
import { JobSeriesCache } from './job-series.js';
import { resolveMetrics, type MetricsOption, type QueueMetrics } from './metrics.js';
import { detached, resolveTracer, type TracingOption } from './tracing.js';
import { resolvePool, type PoolSource } from './pool.js';
import { createRetention, type Retention, type RetentionOptions } from './retention.js';
import { CLAIM_SESSION_SQL, claimJobs, inClaimOrder, type ClaimedRow } from './sql/claim.js';
import { namedStatement, preparedRunner } from './prepared.js';
import { releaseJobs } from './sql/settle.js';
import { createSweeper, type Sweeper, type SweeperOptions } from './sweeper.js';
import type { ScheduleDefinition } from './schedule.js';
import { createScheduler, type Scheduler, type SchedulerOptions } from './scheduler.js';
import { createAdmitter, type Admitter, type AdmitterOptions } from './admitter.js';
import { retryDelayMs, sleep, withJitter } from './timers.js';

const workerOptionsSchema = z.object({
  queues: z.array(queueName).min(1).max(100).optional(),
  concurrency: z.number().int().min(1).max(1_000).default(10),
  batchSize: z.number().int().min(1).max(1_000).optional(),
  maxPrefetch: z.number().int().min(0).max(1_000).default(1_000),
  maxPrefetchBytes: z
    .number()
    .int()
    .min(0)
    .max(2 ** 30)
    .default(8 * 2 ** 20),
  prefetchWindowMs: z.number().int().min(0).max(60_000).default(50),
  /**
   * Longest a claimed job waits in the local buffer for a slot (default 1 s, 20 prefetch windows).
   * Past it the buffer is handed back, without spending an attempt, for other workers to take,
   * and this worker claims no more than its free slots until one of its handlers finishes: its
   * slots are held by jobs far slower than the ones it sized the buffer by, or by handlers that
   * outlived their attempts.
   */
  maxPrefetchWaitMs: z.number().int().min(10).max(3_600_000).default(1_000),
  pollIntervalMs: z.number().int().min(10).max(600_000).default(1_000),
  listen: z.boolean().default(true),
  heartbeatIntervalMs: z.number().int().min(50).max(3_600_000).optional(),
  agingMs: z
    .number()
    .int()
    .min(0)
    .nullable()
    .default(5 * 60_000),
  shutdownTimeoutMs: z.number().int().min(0).max(3_600_000).default(30_000),
  settleAttempts: z.number().int().min(1).max(100).default(8),
  workerId: z.string().min(1).max(200).optional(),
  /**
   * Longest chain of jobs handed to this worker by the jobs before them (a saga's steps) before the
   * next one goes through the queue for any worker; 0 turns hand-offs off. See `HandOffSlot`.
   */
  maxHandOffs: z.number().int().min(0).max(1_000).default(16),
  /**
   * Claims, batched completions, lease renewals and releases commit without waiting for their WAL
   * flush (default true). A PostgreSQL crash may then forget the last few hundred milliseconds of
   * them: those jobs run again, none is lost, and `completeWith`, failures and enqueues always
   * wait. False keeps the server's own `synchronous_commit` for them too.
   */
  asyncCommit: z.boolean().default(true),
  /**
   * Send the claim and the completions as named prepared statements (default true): each
   * connection parses and plans them once (enqueue-to-start p50 3.76 ms against 5.26 ms with
   * them off, `pnpm bench` latency scenario). Turn off behind PgBouncer in transaction mode
   * before 1.21 or with `max_prepared_statements = 0`; left on there, the first failure turns
   * them off (reason `prepared_statements_off`) and the statement, or the completing
   * transaction it was in, is run again.
   */
  preparedStatements: z.boolean().default(true),
  /**
   * When a job of a type this worker does not define is due again (default the jobs' default:
   * 1 s, doubling, with jitter down to half). The worker hands it back with its attempt given
   * back (`unknown_type_released`), so that in a rolling deploy a worker that defines the type
   * takes it (before, it went dead on its first claim).
   */
  unknownTypeBackoff: backoffSchema.optional(),
  /**
   * The claim, by a worker that does not define its type, at which such a job goes dead as
   * `unknown_type` instead (default 10, at most 20: 4-8.5 min of hand-backs at the default
   * backoff). Counted in the job's newest history entry, so it starts again after a failure of
   * its own or an operator's retry.
   */
  unknownTypeMaxAttempts: z.number().int().min(1).max(20).default(10),
});

export interface WorkerOptions extends PoolSource, z.input<typeof workerOptionsSchema> {
  jobs: readonly AnyJobDefinition[];
  logger?: Logger | undefined;
  /** Run the stale-lease sweeper in this process (default true; one pass at a time across hosts). */
  sweeper?: boolean | SweeperOptions | undefined;
  /** Prune finished jobs from this process (default true; one pass at a time across hosts). */
  retention?: boolean | RetentionOptions | undefined;
  /**
   * Cron schedules (`defineSchedule`) this process enqueues the ticks of. Any number of workers
   * may run the same schedules: each tick is enqueued once, with no leader.
   */
  schedules?: readonly ScheduleDefinition[] | undefined;
  scheduler?: SchedulerOptions | undefined;
  /**
   * Admits jobs with a concurrency key into free slots of their key (default true). At least one
   * worker must run it; turn it off only where another process does.
   */
  admitter?: boolean | AdmitterOptions | undefined;
  /**
   * Where the worker and its services record their Prometheus metrics: a prom-client `Registry`
   * (share one with `createSagaRuntime` and `serveMetrics`), or another worker's `metrics`.
   * Default: a registry of the worker's own, never prom-client's global one.
   */
  metrics?: MetricsOption | undefined;
  /**
   * Refreshes the `skiplock_jobs`, `skiplock_oldest_runnable_age_seconds` and `skiplock_schedules`
   * gauges from bounded reads every 15 s. Off by default: `true` (or options) turns it on, its
   * `queues` defaulting to the worker's. Each process that turns it on runs the same queries,
   * uncoordinated: turn it on in one (the one serving /metrics), or run `createJobGauges` once
   * instead.
   */
  jobGauges?: boolean | JobGaugesOptions | undefined;
  /**
   * OpenTelemetry: each run is a `process <queue>` consumer span linked to its enqueue's span (a
   * child of it for job types with `trace: 'continue'`). Default true: the global tracer provider,
   * a no-op until an SDK registers one; `{ tracerProvider }` for another, `false` for none.
   */
  tracing?: TracingOption;
}

export interface StopOptions {
  /**
   * How long in-flight jobs may keep running before they are aborted and released (0 to an
   * hour; default the worker's `shutdownTimeoutMs`).
   */
  timeoutMs?: number | undefined;
  /**
   * Bounds the stop's other waits (default 10 s): once before `timeoutMs` for the claim loop's
   * end, the release of buffered jobs and starts still holding a slot this worker lent them
   * (`attachWorker` in `@skiplock/saga`) together, and once after it for releasing running jobs
   * and closing connections. With a database that does not answer, stop() returns within
   * `timeoutMs` plus twice `graceMs`, leaving what it could not release to lease expiry. 0 to
   * an hour.
   */
  graceMs?: number | undefined;
}

export interface Worker {
  readonly id: string;
  /** The worker's Prometheus metrics; `metrics.registry` is what to serve. */
  readonly metrics: QueueMetrics;
  readonly sweeper: Sweeper | null;
  readonly retention: Retention | null;
  /** Runs `schedules`; null when the worker has none. */
  readonly scheduler: Scheduler | null;
  /** Admits waiting jobs of concurrency keys; null with `admitter: false`. */
  readonly admitter: Admitter | null;
  /** Refreshes the job gauges; null unless `jobGauges` is set. */
  readonly jobGauges: JobGauges | null;
  /** Starts claiming; resolves once the loop runs. */
  start(): Promise<void>;
  /**
   * Stops claiming at once, lets in-flight jobs finish until the deadline, then aborts the rest
   * (their signal fires with `ShutdownError`) and releases them to pending without spending an
   * attempt. Closes the pool if the worker created it.
   */
  stop(options?: StopOptions): Promise<void>;
  /**
   * Claims one batch (up to its free slots) and runs it to its settle, without starting the
   * loop. Returns the count: 0 too when every slot is held by a handler that outlived its attempt.
   * With `listen` (and prepared statements) on it claims on the LISTEN connection as the loop
   * does, opening it on first use and keeping it until `stop()`: a worker never started must
   * then still be stopped, or that connection keeps the process alive.
   */
  runOnce(): Promise<number>;
  /** Renews the leases of running jobs now (normally done on an interval). */
  heartbeat(): Promise<HeartbeatResult>;
  on: SafeEmitter<WorkerEvents>['on'];
  once: SafeEmitter<WorkerEvents>['once'];
  /** Number of jobs currently claimed by this worker. */
  readonly inFlight: number;
}

/** Default for how long stop() waits for releases and closes after the drain deadline. */
const STOP_GRACE_MS = 10_000;

/**
 * `stop()`'s options, bounded as `shutdownTimeoutMs` is: Node fires a timer of more than 2^31-1
 * ms after 1 ms, so `timeoutMs: Infinity` aborted every handler at once, and a NaN grace cut
 * every wait (found in review).
 */
const stopOptionsSchema = z
  .object({
    timeoutMs: z.number().int().min(0).max(3_600_000).optional(),
    graceMs: z.number().int().min(0).max(3_600_000).optional(),
  })
  .strict();
/**
 * How long runOnce() waits for the LISTEN connection it claims on to come up before it claims on
 * the pool instead. A connection takes a few ms here; an attempt that fails ends the wait at once
 * (the claim then goes on the pool, and fails there too if the server is down).
 */
const RUN_ONCE_LISTEN_WAIT_MS = 2_000;

/** True when `work` settled within `ms`; never rejects. */
async function settleWithin(ms: number, work: Promise<unknown>): Promise<boolean> {
  const timer = new AbortController();
  const done = await Promise.race([
    work.then(
      () => true,
      () => true,
    ),
    sleep(ms, timer.signal).then(() => false),
  ]);
  timer.abort();
  return done;
}

export function createWorker(options: WorkerOptions): Worker {
  const { jobs, logger: givenLogger, sweeper: sweeperOption, retention: retentionOption } = options;
  rejectUnknownKeys('worker options', options, [
    ...Object.keys(workerOptionsSchema.shape),
    'jobs',
    'logger',
    'sweeper',
    'retention',
    'schedules',
    'scheduler',
    'admitter',
    'metrics',
    'jobGauges',
    'tracing',
    'pool',
    'connectionString',
    'maxConnections',
  ]);
  const config = parseConfig('worker options', workerOptionsSchema, {
    queues: options.queues,
    concurrency: options.concurrency,
    batchSize: options.batchSize,
    maxPrefetch: options.maxPrefetch,
    maxPrefetchBytes: options.maxPrefetchBytes,
    prefetchWindowMs: options.prefetchWindowMs,
    maxPrefetchWaitMs: options.maxPrefetchWaitMs,
    pollIntervalMs: options.pollIntervalMs,
    listen: options.listen,
    heartbeatIntervalMs: options.heartbeatIntervalMs,
    agingMs: options.agingMs,
    shutdownTimeoutMs: options.shutdownTimeoutMs,
    settleAttempts: options.settleAttempts,
    workerId: options.workerId,
    maxHandOffs: options.maxHandOffs,
    asyncCommit: options.asyncCommit,
    preparedStatements: options.preparedStatements,
    unknownTypeBackoff: options.unknownTypeBackoff,
    unknownTypeMaxAttempts: options.unknownTypeMaxAttempts,
  });
  if (!Array.isArray(jobs) || jobs.length === 0) {
    throw new ConfigError('invalid worker options: jobs: give at least one job definition');
  }
  const definitions = new Map<string, AnyJobDefinition>();
  for (const def of jobs) {
    if (definitions.has(def.type)) {
      throw new ConfigError(
        `invalid worker options: jobs: job type "${def.type}" is defined twice`,
      );
    }
    definitions.set(def.type, def);
  }
  const rateLimited = jobs.some((d) => d.rateLimit !== null);
  const id = config.workerId ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  const logger = (givenLogger ?? createDefaultLogger()).child({ worker: id });
  const queues = config.queues ?? [...new Set(jobs.map((d) => d.queue))];
  const batchSize = config.batchSize ?? Math.min(1_000, config.concurrency + config.maxPrefetch);
  const minLeaseMs = Math.min(...jobs.map((d) => d.leaseMs));
  // A third of the shortest lease leaves two renewals' room before a slow tick loses a lease.
  const heartbeatIntervalMs =
    config.heartbeatIntervalMs ?? Math.max(100, Math.floor(minLeaseMs / 3));
  if (heartbeatIntervalMs >= minLeaseMs) {
    throw new ConfigError(
      `invalid worker options: heartbeatIntervalMs (${heartbeatIntervalMs}) must be shorter than the shortest leaseMs (${minLeaseMs})`,
    );
  }

  const owned = resolvePool(
    // Handlers hold no connection; claims, settles, heartbeats and the services need a few.
    { ...options, maxConnections: options.maxConnections ?? Math.min(config.concurrency + 3, 20) },
    logger,
    'worker',
  );
  const pool = owned.pool;
  const metrics = resolveMetrics(options.metrics);
  const events = new SafeEmitter<WorkerEvents>(logger);
  const run = preparedRunner({
    enabled: config.preparedStatements,
    pool,
    logger,
    who: 'the worker',
  });
  const completer = new Completer(pool, id, config.asyncCommit, run, config.settleAttempts, logger);
  /** Every claimed job until it is settled: buffered, running or settling. Heartbeats cover it. */
  const running = new Map<string, RunningJob>();
  /** Claimed jobs waiting for a free slot, in claim order. */
  const buffered: RunningJob[] = [];
  const inflight = new Set<Promise<void>>();
  /** Open completing transactions that may hand off (see `HandOffSlot.room`); one per job at most. */
  const handingOff = new Set<HandOffSlot>();
  /**
   * Slots lent to transactions of this process that are not jobs' (a saga's start) and still
   * open: stop() waits for them, so what they hand off is released while the pool is open.
   */
  const lent = new Set<HandOffSlot>();
  let lentClosed: (() => void) | null = null;
  /** The release of jobs handed off after stopping began (see `adopt`), for stop() to await. */
  let lateRelease: Promise<void> = Promise.resolve();
  let active = 0;
  /**
   * Set when the buffer was handed back after waiting `maxPrefetchWaitMs`; until one of this
   * worker's handlers finishes, it claims for its free slots only.
   */
  let slotsStuck = false;
  /**
   * Slots promised to admissions in flight that lease rate-limited jobs to this worker: a start
   * is logged as it is leased, so such a job must run at once. Claims count them out of their
   * room, and `pump` does not start buffered jobs in them, so that a claim answering meanwhile
   * cannot fill them (found by an audit: the leased job, its start logged, waited behind the
   * claimed one and started 178 ms before the next window's under 1/s). Kept by workers that run
   * rate-limited types only.
   */
  let admitting = 0;
  let averageDurationMs: number | null = null;
  /** Running average of the payload JSON size of claimed jobs, for `maxPrefetchBytes`. */
  let averagePayloadBytes = 0;
  const admitter =
    options.admitter === false
      ? null
      : createAdmitter({
          pool,
          logger,
          metrics,
          ...(typeof options.admitter === 'object' ? options.admitter : {}),
          // The next job of a key this worker just freed runs here at once, leased by the
          // admission itself: a key's jobs follow each other without a NOTIFY and a claim.
          lease: {
            workerId: id,
            queues,
            types: [...definitions.keys()],
            // A rate-limited job's start is logged as it is leased: one leased into the prefetch
            // buffer behind a long job started later, with the next interval's, all at once
            // (found in review: 6 starts in one second under a limit of 2). A worker that runs
            // such types leases admissions only into slots free to run them now.
            room: () => {
              if (state !== 'running') return 0;
              if (!rateLimited) return room();
              const free = room(0);
              admitting += free;
              return free;
            },
            // Called before `adopt`, in the same turn: the jobs it leased take the slots first.
            release: (free) => {
              if (!rateLimited) return;
              admitting -= free;
              wake('slot');
              queueMicrotask(pump);
            },
            adopt: (rows, sent) => {
              // At the front, as hand-offs: leased to run now, they start before claimed ones.
              for (const row of rows) void accept(row, 0, undefined, undefined, rateLimited);
              // A stop heard while the admission was answering may be of a job it leased, which
              // the renewal the stop set off did not know yet (as for a claim, see `claim`).
              if (lastStopHeard >= sent) renewOnceTakenIn();
              // Stopping began while the admission ran: hand them back with the rest, before
              // stop() returns (it awaits `lateRelease` after the admitter's stop).
              if (state !== 'running') {
                lateRelease = Promise.all([lateRelease, releaseBuffered()]).then(() => {});
              } else pump();
            },
          },
        });
  const series = new JobSeriesCache(metrics);
  const deps: ExecutorDeps = {
    pool,
    workerId: id,
    definitions,
    completer,
    logger,
    metrics,
    series,
    events,
    settleAttempts: config.settleAttempts,
    unknownTypeRetry: {
      backoff: backoffWith(config.unknownTypeBackoff),
      maxAttempts: config.unknownTypeMaxAttempts,
    },
    asyncCommit: config.asyncCommit,
    tracer: resolveTracer(options.tracing, 'worker options'),
    run,
    handlerDone: (_job, durationMs) => {
      active -= 1;
      slotsStuck = false;
      averageDurationMs =
        averageDurationMs === null ? durationMs : averageDurationMs * 0.9 + durationMs * 0.1;
      pump();
      wake('slot');
    },
    slotFreed: (key) => admitter?.freed(key),
    track: (task) => {
      inflight.add(task);
      void task.finally(() => inflight.delete(task));
    },
    handOff:
      config.maxHandOffs === 0
        ? null
        : {
            limit: config.maxHandOffs,
            // Only a started worker: `runOnce()` runs what one claim took, nothing more.
            accepts: (jobType, queue) =>
              state === 'running' && definitions.has(jobType) && queues.includes(queue),
            // The running job's own slot, and the free ones not yet promised: buffered jobs and
            // the extra hand-offs of other completing transactions (each one's first takes its
            // own job's slot) will take those.
            room: (self) => {
              let promised = buffered.length;
              for (const other of handingOff) {
                // Each one's first hand-off takes its own job's slot; a lent slot has no job.
                const own = other.firstNeedsRoom === true ? 0 : 1;
                if (other !== self) promised += Math.max(0, promisedBy(other) - own);
              }
              return config.concurrency - active - promised + 1;
            },
            opened: (slot) => void handingOff.add(slot),
            closed: (slot) => void handingOff.delete(slot),
            adopt: ({ row, carry, leasedAt }, depth) => {
              metrics.handedOff.inc();
              void accept(row, depth, carry, leasedAt);
              // Its stop can come once the handing transaction committed, before this adoption:
              // the renewal that stop set off did not know the job yet (as for a claim).
              if (lastStopHeard >= leasedAt) renewOnceTakenIn();
              // Stopping began after the insert: hand it back with the rest of the buffer.
              if (state !== 'running') {
                lateRelease = Promise.all([lateRelease, releaseBuffered()]).then(() => {});
              } else pump();
            },
          },
  };
  const heartbeat = new Heartbeat(
    pool,
    id,
    config.asyncCommit,
    heartbeatIntervalMs,
    () => running.values(),
    logger,
    (h) =>
      logger.warn(
        { reason: 'lock_lost', jobId: h.token.id, attempt: h.token.attempt },
        'lease lost; aborting handler',
      ),
  );
  const sweeper =
    sweeperOption === false
      ? null
      : createSweeper({
          pool,
          logger,
          metrics,
          jobs,
          ...(typeof sweeperOption === 'object' ? sweeperOption : {}),
        });
  const retention =
    retentionOption === false
      ? null
      : createRetention({
          pool,
          logger,
          metrics,
          ...(typeof retentionOption === 'object' ? retentionOption : {}),
        });
  const scheduler =
    options.schedules && options.schedules.length > 0
      ? createScheduler({
          pool,
          logger,
          metrics,
          tracing: options.tracing,
          schedules: options.schedules,
          ...(options.scheduler ?? {}),
        })
      : null;
  const jobGauges =
    options.jobGauges === undefined || options.jobGauges === false
      ? null
      : createJobGauges({
          pool,
          logger,
          metrics,
          queues,
          ...(typeof options.jobGauges === 'object' ? options.jobGauges : {}),
        });
  const listener = config.listen
    ? new Listener({
        connection: pool.options as pg.ClientConfig,
        logger,
        onNotify: (queue) => {
          if (queue === '*' || queues.includes(queue)) wake('work');
        },
        // Admissions are the admitter's, which runs only in a started worker (runOnce() opens
        // this connection too, and must not set it going).
        onAdmit: (key) => {
          if (state === 'running') admitter?.poke(key);
        },
        // An operator stopped a job of this worker's (or the connection was down and a stop may
        // have gone unheard): renew now, which aborts its handler or keeps it from starting.
        onStop: (worker) => {
          if ((worker !== id && worker !== '*') || state === 'stopped') return;
          lastStopHeard = performance.now();
          heartbeat.renewNow();
        },
        sessionSql: CLAIM_SESSION_SQL,
      })
    : null;

  // The LISTEN connection plans the claim once, generically (CLAIM_SESSION_SQL): that saves
  // only for a prepared claim; unnamed, the claim goes on the pool and leaves that connection to
  // its notifications.
  const claimsOnListener = listener !== null && config.preparedStatements;

  let state: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  /** performance.now() of the last stop of one of this worker's jobs it heard (see `claim`). */
  let lastStopHeard = -Infinity;
  let renewScheduled = false;
  /**
   * One lease renewal, in the next macrotask, once the jobs being taken in now are all in: a
   * claim's rows, or each successor of a transaction that handed off several (one renewal for
   * them all, not one each).
   */
  function renewOnceTakenIn() {
    if (renewScheduled) return;
    renewScheduled = true;
    setImmediate(() => {
      renewScheduled = false;
      heartbeat.renewNow();
    });
  }
  let loopDone: Promise<void> | null = null;
  // runOnce()'s claim while it is in flight, with its rows taken into the buffer: stop() waits for
  // it (bounded, as for the loop's) before it releases the buffer, so what the claim leased is
  // handed back on a pool and a LISTEN connection still open.
  let onceClaim: Promise<void> | null = null;
  let stopping: Promise<void> | null = null;
  let workRequested = false;
  let napping: { why: 'slot' | 'work'; done: () => void } | null = null;

  function wake(why: 'slot' | 'work' | 'stop') {
    if (why === 'work') workRequested = true;
    if (napping && (why === 'stop' || napping.why === why)) napping.done();
  }

  function nap(why: 'slot' | 'work', ms: number | null): Promise<void> {
    return new Promise((resolve) => {
      const timer = ms === null ? null : setTimeout(() => done(), ms);
      const done = () => {
        if (timer) clearTimeout(timer);
        napping = null;
        resolve();
      };
      napping = { why, done };
    });
  }

  async function claim(limit: number): Promise<ClaimedRow[]> {
    const started = performance.now();
    // On the LISTEN connection while it is up (see CLAIM_SESSION_SQL), else on the pool.
    const client = claimsOnListener ? (listener?.claimClient ?? null) : null;
    const { rows } = await run<ClaimedRow>(
      client ?? pool,
      namedStatement(
        'skiplock_claim',
        claimJobs({
          queues,
          limit,
          workerId: id,
          agingMs: config.agingMs,
          asyncCommit: config.asyncCommit,
        }),
      ),
      undefined,
      client !== null,
    );
    metrics.claimDuration.observe((performance.now() - started) / 1000);
    metrics.claimBatchSize.observe(rows.length);
    // A stop heard while the claim was in flight may be of a job it took, which the renewal the
    // stop set off did not know yet: one more renewal, once the caller has taken the rows in (the
    // next macrotask), aborts it before or just after it starts rather than a tick later.
    if (rows.length > 0 && lastStopHeard >= started) renewOnceTakenIn();
    inClaimOrder(rows);
    if (rows.length > 0) {
      let bytes = 0;
      for (const row of rows) bytes += row.payload_bytes ?? 0;
      const batch = bytes / rows.length;
      // The first batch sets it; later ones move it, so a change of payloads shows within a few.
      averagePayloadBytes =
        averagePayloadBytes === 0 ? batch : averagePayloadBytes * 0.5 + batch * 0.5;
    }
    return rows;
  }

  /**
   * How many jobs beyond the free slots to claim ahead. Claiming in bigger batches saves a round
   * trip per job when handlers are quick, but a buffered job is work other workers cannot take, so
   * the buffer holds at most `prefetchWindowMs` of work at the observed handler speed, and nothing
   * until a speed has been observed. Memory is bounded twice: at most `maxPrefetch` jobs, and at
   * most `maxPrefetchBytes` of payload JSON at the observed average size. Buffered jobs keep
   * their leases through heartbeats. The default of 1,000 (was 200) is what a no-op drain at
   * concurrency 10 needed to reach the bare SQL claim's rate (issue 13: 17,444 jobs/s at 200,
   * 26,828 at 1,000, bare 27,327).
   */
  function prefetchLimit(): number {
    if (averageDurationMs === null || config.maxPrefetch === 0 || slotsStuck) return 0;
    const perSlot = config.prefetchWindowMs / Math.max(averageDurationMs, 0.01);
    return Math.min(
      config.maxPrefetch,
      Math.floor(config.concurrency * perSlot),
      Math.floor(config.maxPrefetchBytes / Math.max(averagePayloadBytes, 1)),
    );
  }

  /**
   * Jobs the next claim may take; 0 means not yet. The worker keeps `concurrency` jobs running
   * and up to `prefetchLimit()` buffered, and refills once the buffer is half empty rather than
   * empty, so the claim's round trip overlaps the jobs still buffered instead of leaving the slots
   * idle while it runs. Claimed jobs whose completion is still being written count against a
   * second bound: if completions fall behind claims, the worker stops claiming rather than pile
   * up unsettled work (and leases) without bound.
   */
  function claimLimit(): number {
    const prefetch = prefetchLimit();
    if (buffered.length > Math.floor(prefetch / 2)) return 0;
    return room(prefetch);
  }

  /**
   * Jobs the worker can take now, the bound of a claim without its hysteresis (an admission that
   * leases uses it as is): room to run and buffer, and unsettled jobs within twice that.
   */
  function room(prefetch = prefetchLimit()): number {
    const target = config.concurrency + prefetch;
    return Math.max(
      0,
      Math.min(
        target - buffered.length - active - admitting,
        2 * target - running.size - admitting,
        batchSize,
      ),
    );
  }

  /**
   * Takes a claimed job into the buffer: at the back for a claim, at the front for a hand-off, so
   * that it runs in the slot its predecessor frees.
   */
  function accept(
    row: ClaimedRow,
    handOffDepth = 0,
    carry?: unknown,
    leasedAt?: number,
    front = handOffDepth > 0,
  ): Promise<void> {
    const job = new RunningJob(row);
    job.handOffDepth = handOffDepth;
    job.carry = carry;
    // A hand-off's lease ran from its insert, not from now (see `run` in executor.ts).
    if (leasedAt !== undefined) job.renewedAt = leasedAt;
    // The same job claimed again while an earlier attempt of it is still here: the sweeper took
    // that one back after its lease ran out (or a server crash forgot its claim). The earlier one
    // is no longer this worker's to finish; it must not evict the new attempt from the heartbeat.
    running.get(row.id)?.abort(new LockLostError(row.id));
    running.set(row.id, job);
    // Leased for less than this worker's definitions say (see `Heartbeat.adopt`).
    if (row.lease_ms < 3 * heartbeatIntervalMs) heartbeat.adopt(row.lease_ms);
    if (events.listening('job:claimed')) {
      events.emit('job:claimed', {
        jobId: row.id,
        jobType: row.job_type,
        queue: row.queue,
        attempt: row.attempts,
      });
    }
    // One promise per job for its whole stay (buffered, run, settled), not a chain of them: a
    // drain allocates per job, and the promises, closures and their collection were a large part
    // of its Node CPU (see bench/README.md, "Queue hot path").
    let finish!: (error?: unknown) => void;
    const task = new Promise<void>((resolve, reject) => {
      finish = (error) => (error === undefined ? resolve() : reject(error));
    });
    const settled = (error?: unknown) => {
      if (running.get(row.id) === job) running.delete(row.id);
      inflight.delete(task);
      wake('slot');
      finish(error);
    };
    job.turn = (run) => {
      job.turn = null;
      if (!run) return settled();
      // executeJob never rejects (nor throws, but for a tracer that does); were it to, the task
      // fails with its error, as it did when it was a chain of promises.
      let done: Promise<void>;
      try {
        done = executeJob(deps, job);
      } catch (error) {
        return settled(error);
      }
      done.then(() => settled(), settled);
    };
    inflight.add(task);
    if (front) buffered.unshift(job);
    else buffered.push(job);
    return task;
  }

  /** Starts buffered jobs while slots are free. */
  function pump(): void {
    // Once stop() has begun, buffered jobs are handed back, never started.
    if (state === 'stopping' || state === 'stopped') return;
    while (active + admitting < config.concurrency && buffered.length > 0) {
      const job = buffered.shift()!;
      active += 1;
      job.turn!(true);
    }
  }

  async function loop(): Promise<void> {
    let failures = 0;
    while (state === 'running') {
      const limit = claimLimit();
      if (limit <= 0) {
        // Never without a timer: a hand-off may join the buffer while the loop naps.
        await nap('slot', checkBufferWait() ?? config.maxPrefetchWaitMs);
        continue;
      }
      workRequested = false;
      let rows: ClaimedRow[];
      try {
        rows = await claim(limit);
        failures = 0;
      } catch (error) {
        // A claim cut short by stop() (its connection closed under it) is not a failure.
        if (state !== 'running') break;
        failures += 1;
        metrics.claimErrors.inc();
        logger.warn(
          { reason: 'db_error', err: errorMessage(error), failures },
          'claim failed; backing off',
        );
        events.emit('worker:error', { reason: 'claim_failed', error });
        await nap('work', retryDelayMs(failures));
        continue;
      }
      for (const row of rows) void accept(row);
      if (state !== 'running') {
        lateHandBack();
        break;
      }
      pump();
      if (rows.length === limit || workRequested) continue;
      if (running.size === 0) events.emit('worker:idle');
      const poll = withJitter(config.pollIntervalMs);
      await nap('work', Math.min(poll, checkBufferWait() ?? poll));
    }
  }

  /**
   * How long until the oldest buffered job has waited `maxPrefetchWaitMs` for a slot, or null
   * with nothing buffered. Once it has, the buffer is handed back (see the option). The loop
   * checks before each nap, and naps no longer than the option or its poll interval, so a job
   * waits at most about twice the option (one that joined the buffer during a nap).
   */
  function checkBufferWait(): number | null {
    if (buffered.length === 0) return null;
    let oldest = Number.POSITIVE_INFINITY;
    for (const job of buffered) oldest = Math.min(oldest, job.takenAt);
    const waited = performance.now() - oldest;
    if (waited < config.maxPrefetchWaitMs) return Math.ceil(config.maxPrefetchWaitMs - waited);
    slotsStuck = true;
    logger.warn(
      {
        reason: 'prefetch_released',
        jobs: buffered.length,
        waitedMs: Math.round(waited),
        running: active,
      },
      'buffered jobs waited too long for a slot; handed back for other workers',
    );
    // Its jobs' tasks settle when the release has run; stop() waits for them.
    void releaseBuffered('buffer_wait');
    return null;
  }

  /**
   * Hands buffered jobs back without running them: one statement, no attempt spent; on stop, and
   * while the worker runs on once they waited `maxPrefetchWaitMs` (`buffer_wait`). Then a failed
   * statement keeps the jobs: still leased here, they go back to the buffer, renewed by the
   * heartbeat, and the next check tries again; dropped, each would wait out its lease and lose an
   * attempt it never ran. On stop they are dropped, and their leases expire.
   */
  async function releaseBuffered(
    reason: 'not_started' | 'buffer_wait' = 'not_started',
  ): Promise<void> {
    const jobs = buffered.splice(0);
    if (jobs.length === 0) return;
    // Out of the heartbeat meanwhile: a tick after the release committed would take the rows it
    // no longer finds for lost leases, and log each.
    for (const job of jobs) job.state = 'settling';
    try {
      // Only copies still current here: one superseded by a later claim of the same job (see
      // `accept`) carries the same token as that later run once a retry reset `attempts`, so
      // handing it back, or clearing its lease, would take the job from its own later run (found
      // in review).
      const current = jobs.filter((j) => running.get(j.info.id) === j);
      const { rows } =
        current.length === 0
          ? { rows: [] }
          : await runSql<{ id: string }>(
              pool,
              releaseJobs(
                id,
                current.map((j) => j.token),
                config.asyncCommit,
              ),
            );
      const released = new Set(rows.map((r) => r.id));
      for (const job of current) {
        if (released.has(job.info.id)) series.of(job.info.queue, job.info.type).released(reason);
      }
      // Not handed back: no longer this worker's. One stopped by an operator as it waited kept
      // its lease and slot; give them back (stop() waits for this, as for the hand-back).
      const stopped = current.filter((j) => !released.has(j.info.id));
      await Promise.all(stopped.map((j) => releaseStoppedUnstarted(deps, j)));
    } catch (error) {
      if (reason === 'buffer_wait' && state === 'running') {
        logger.warn(
          { reason: 'db_error', err: errorMessage(error), jobs: jobs.length },
          'hand-back of waiting buffered jobs failed; they stay buffered',
        );
        for (const job of jobs) {
          job.state = 'queued';
          job.handBackFailed = true;
        }
        buffered.unshift(...jobs);
        pump();
        return;
      }
      logger.warn(
        { reason: 'db_error', err: errorMessage(error) },
        'release failed; leases will expire',
      );
    }
    for (const job of jobs) {
      job.abort(new ShutdownError());
      job.state = 'done';
      job.turn!(false);
    }
  }

  /** Set as stop() hands back the buffer: jobs a claim adds after that are handed back by it. */
  let bufferHandedBack = false;
  /** The late hand-back, if any: an owned pool ends after it (see doStop). */
  let lateHandBackDone: Promise<void> = Promise.resolve();

  /**
   * A claim that answered after stop() handed back the buffer (its grace cut the wait for the
   * claim short) hands back what it claimed. Before, those jobs stayed in the buffer, leased to a
   * stopped worker until their leases ran out, each attempt spent, and a `runOnce()` waiting
   * for them never returned (found by an audit).
   */
  function lateHandBack(): void {
    if (bufferHandedBack) lateHandBackDone = releaseBuffered();
  }

  async function doStop(stopOptions: StopOptions): Promise<void> {
    const deadlineMs = stopOptions.timeoutMs ?? config.shutdownTimeoutMs;
    const wasRunning = state === 'running';
    state = 'stopping';
    wake('stop');
    const graceMs = stopOptions.graceMs ?? STOP_GRACE_MS;
    // The waits before the drain share one grace: with a database that hangs, each of them can
    // take all of it, and a grace apiece made stop() take up to four before its deadline.
    const graceEnds = performance.now() + graceMs;
    const graceLeft = () => Math.max(0, graceEnds - performance.now());
    // The loop ends at its next turn, unless it waits on a claim the database never answers; the
    // buffer's release is a write too. Both are bounded like the rest of the stop, so a hung
    // database cannot hold stop() (what they leave leased is swept when the leases expire).
    // Which of those waits the grace cut short, for stop_timeout.
    const cut: string[] = [];
    const within = async (what: string, work: Promise<unknown>) => {
      if (!(await settleWithin(graceLeft(), work))) cut.push(what);
    };
    const claims = [loopDone, onceClaim];
    if (loopDone) await within('claim', loopDone);
    if (onceClaim) await within('claim', onceClaim);
    bufferHandedBack = true;
    await within('release', releaseBuffered());
    // A start this worker lent a slot to may still commit a job leased to it (handed back as it
    // is adopted, see `adopt`): wait for those transactions and that release (bounded), so the
    // job is not left to lease expiry by a pool closed under it.
    if (lent.size > 0) {
      await within('lent', new Promise<void>((resolve) => (lentClosed = resolve)));
    }
    await within('release', lateRelease);
    logger.info(
      { reason: 'worker_stopping', inFlight: running.size, deadlineMs },
      'worker stopping',
    );
    if (inflight.size > 0) {
      const deadline = new AbortController();
      await Promise.race([Promise.allSettled([...inflight]), sleep(deadlineMs, deadline.signal)]);
      deadline.abort();
    }
    for (const job of running.values()) job.abort(new ShutdownError());
    // Releasing and closing are bounded too: with a database that hangs instead of failing, a
    // worker must still stop. What did not land is recovered by the sweeper when leases expire.
    // The listener may have been opened by runOnce() on a worker never started, and the admitter
    // may be admitting for a job runOnce() settled (stop() waits for that). Each stop() may be
    // called twice (see below); allSettled, so that one failing does not skip the rest.
    type Stoppable = readonly [string, { stop(): Promise<void> } | null];
    const services: Stoppable[] = [
      ['listener', listener],
      ['admitter', admitter],
      ...(wasRunning
        ? ([
            ['heartbeat', heartbeat],
            ['sweeper', sweeper],
            ['retention', retention],
            ['scheduler', scheduler],
            ['gauges', jobGauges],
          ] satisfies Stoppable[])
        : []),
    ];
    const stopServices = async () => {
      const results = await Promise.allSettled(services.map(([, service]) => service?.stop()));
      results.forEach((result, i) => {
        if (result.status === 'rejected') {
          logger.warn(
            { reason: 'stop_failed', service: services[i]![0], err: errorMessage(result.reason) },
            'a service failed to stop',
          );
        }
      });
    };
    const finished = await settleWithin(
      graceMs,
      (async () => {
        await Promise.allSettled([...inflight]);
        await completer.drain();
        // Every stop() is called at once, so each loop is told to end at once: one that waits on
        // a database that hangs (the listener's close, say) cannot keep the others running.
        await stopServices();
        // An admission the admitter's stop waited for may have leased jobs here as it ended;
        // their release must land before the pool closes, or they went dead unrun (found in
        // review: the release was sent on an ending pool and never answered).
        await lateRelease;
        if (!cut.includes('claim')) return owned.release();
        // A claim the grace cut short may still answer, and its jobs go back on this pool (see
        // lateHandBack): a pool of the worker's own ends after that, in the background. Ended
        // here, the hand-back failed and the jobs waited out their leases (found in review).
        void Promise.allSettled(claims)
          .then(() => lateHandBackDone)
          .then(() => owned.release())
          .catch(() => {});
      })(),
    );
    if (!finished) {
      // What hung may come before the services' stop() (the completer's drain, say): tell them
      // now, so none runs on after stop() returned.
      void stopServices();
      cut.push('close');
    }
    if (cut.length > 0) {
      logger.error(
        { reason: 'stop_timeout', graceMs, unsettled: running.size, cut: [...new Set(cut)] },
        'database did not answer while stopping; leaving the rest to lease expiry',
      );
    }
    state = 'stopped';
    logger.info({ reason: 'stopped' }, 'worker stopped');
  }

  /** See `LOCAL_HAND_OFF`: a slot for a transaction of this process that is not a job's. */
  function lendSlot(): LocalSlot | null {
    const handOff = deps.handOff;
    if (!handOff || state !== 'running') return null;
    // No job of this worker ends with the transaction: only free slots not yet promised.
    const slot = slotWithoutJob(handOff, id, 0);
    handOff.opened(slot);
    lent.add(slot);
    let closed = false;
    const close = () => {
      if (closed) return;
      closed = true;
      handOff.closed(slot);
      slot.open = false;
      // Ended without the commit this process saw (see `releaseUnadopted`): any job it inserted
      // leased here goes back to the queue, should the transaction have committed after all.
      const unadopted = slot.pending;
      slot.pending = [];
      if (unadopted.length > 0) {
        const releasing = releaseUnadopted(
          { pool, workerId: id, asyncCommit: config.asyncCommit, logger },
          unadopted,
        );
        lateRelease = Promise.all([lateRelease, releasing]).then(() => {});
      }
      lent.delete(slot);
      if (lent.size === 0) lentClosed?.();
    };
    return {
      slot,
      committed: () => {
        // Taken out of the slot first, so that `close` cannot release what was adopted.
        for (const handed of slot.pending.splice(0)) handOff.adopt(handed, 1);
        close();
      },
      close,
    };
  }

  const worker: Worker & { [LOCAL_HAND_OFF]: () => LocalSlot | null } = {
    [LOCAL_HAND_OFF]: lendSlot,
    id,
    metrics,
    sweeper,
    retention,
    scheduler,
    admitter,
    jobGauges,
    get inFlight() {
      return running.size;
    },
    async start() {
      if (state !== 'idle') throw new ConfigError(`worker ${id} cannot start: it is ${state}`);
      state = 'running';
      listener?.start();
      heartbeat.start();
      sweeper?.start();
      retention?.start();
      scheduler?.start();
      admitter?.start();
      jobGauges?.start();
      // In the root context, as each service's loop: jobs the loop claims run in the context they
      // were taken in (`takenIn`), never in the caller's.
      loopDone = detached(loop).catch((error) => {
        logger.fatal({ reason: 'loop_crashed', err: errorMessage(error) }, 'worker loop crashed');
      });
      logger.info({ reason: 'started', queues, concurrency: config.concurrency }, 'worker started');
    },
    stop(stopOptions = {}) {
      let checked: StopOptions;
      try {
        checked = parseConfig('stop options', stopOptionsSchema, stopOptions);
      } catch (error) {
        return Promise.reject(error as Error);
      }
      if (state === 'stopped') return Promise.resolve();
      stopping ??= doStop(checked);
      return stopping;
    },
    async runOnce() {
      if (state !== 'idle') throw new ConfigError(`runOnce needs an idle worker; it is ${state}`);
      // The claim goes where a started worker's would: on the LISTEN connection, opened here
      // (and kept until stop()) if it is not yet, or on the pool if it does not come up in time.
      if (claimsOnListener) await listener.ready(RUN_ONCE_LISTEN_WAIT_MS);
      // stop() may have begun while this waited for the connection: nothing is claimed then.
      if (state !== 'idle') return 0;
      let rows: ClaimedRow[] = [];
      let tasks: Promise<void>[] = [];
      // Its free slots: one still held by a handler that outlived an earlier runOnce()'s attempt
      // is not (see `handler_overran`), or what it claimed would wait behind that handler.
      const free = Math.min(config.concurrency - active, batchSize);
      if (free <= 0) return 0;
      const claimed = (async () => {
        rows = await claim(free);
        tasks = rows.map((row) => accept(row));
      })();
      onceClaim = claimed.then(
        () => {},
        () => {},
      );
      try {
        await claimed;
      } catch (error) {
        // A claim cut short by stop() (the LISTEN connection closed under it) claimed nothing
        // this worker can hand back; what the server committed goes back as its lease expires.
        if (state !== 'idle') return 0;
        throw error;
      } finally {
        onceClaim = null;
      }
      // stop() began during the claim: it waited for this claim and hands its jobs back itself,
      // or, past its grace, this hands them back (see `lateHandBack`).
      if (state !== 'idle') {
        lateHandBack();
        await Promise.all(tasks);
        return 0;
      }
      pump();
      // A never-started worker has no heartbeat loop: its ticks renew these jobs' leases while
      // they run (and give up those left unrenewed for a whole lease), or a job longer than its
      // lease is taken back by a sweeper elsewhere and runs twice.
      // Ticks in the root context, not under whatever span the caller of runOnce() had active.
      // Every third of the shortest lease among them, which a producer may have set shorter
      // than this worker's definitions (see `Heartbeat.adopt`).
      const beats = detached(() => setInterval(() => heartbeat.tick(), heartbeat.waitMs()));
      try {
        await Promise.all(tasks);
      } finally {
        clearInterval(beats);
      }
      await completer.drain();
      return rows.length;
    },
    heartbeat: () => heartbeat.beat(),
    on: (event, listener) => events.on(event, listener),
    once: (event) => events.once(event),
  };
  return worker;
}
