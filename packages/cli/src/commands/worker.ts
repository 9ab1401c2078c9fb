import type { Worker } from '@skiplock/queue';
import type { Logger } from 'pino';
import {
  UsageError,
  databaseOption,
  databaseUrl,
  parseInteger,
  parseOptions,
  positionalArgs,
} from '../args.js';
import { logDestination, type Command } from '../io.js';
import type { LoadedJobs } from '../load-jobs.js';

// The worker's own default; used here only to size the pool before the worker exists.
const DEFAULT_CONCURRENCY = 10;

export const workerCommand: Command = {
  name: 'worker',
  summary: 'run the jobs a module exports until SIGTERM or SIGINT, then drain and exit',
  usage: [
    'usage: skiplock worker <module> [--queue Q]... [--concurrency N] [--shutdown-timeout-ms MS]',
    '                       [--poll-interval-ms MS] [--no-listen] [--database-url URL]',
    '',
    '<module> is a .ts or .js file exporting job definitions (made with defineJob): a default',
    'export array, a "jobs" array, or each one as its own export. It may also export',
    '"workerOptions" (createWorker options); the flags below override them. A module that runs',
    'sagas exports its saga runtime too (export const runtime = createSagaRuntime(...), beside',
    'export const jobs = runtime.jobs; alone, its jobs run too): the worker runs its reconciler,',
    'which moves on sagas whose job died where no saga hook ran, and warns',
    '(saga_reconciler_missing) when there is none. Its runtime should define every saga name and',
    'version in flight: a stranded saga of one it does not define is left for the reconciler of',
    'a runtime that does, which compensates it (a warning each pass:',
    'saga_reconcile_unknown_version_left), unless the module made it with reconciler:',
    "{ unknownVersions: 'fail' }, which fails such a saga without compensation.",
    '',
    '  --queue Q                 claim from queue Q (repeat; default: the queues of the jobs)',
    '  --concurrency N           jobs run at once, 1 to 1000 (default 10)',
    '  --shutdown-timeout-ms MS  on SIGTERM/SIGINT, how long running jobs may finish before they',
    '                            are aborted and put back to pending without spending an attempt',
    '                            (default 30000)',
    '  --poll-interval-ms MS     how often to look for work without a notification (default 1000)',
    '  --no-listen               poll only, no LISTEN (for PgBouncer in transaction mode)',
    '',
    'Logs are JSON lines on stdout (level: $SKIPLOCK_LOG_LEVEL, default info). A second signal',
    'exits at once with code 1, leaving running jobs to the sweeper once their leases expire.',
    'The schema must exist: run `skiplock migrate` first.',
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, {
      ...databaseOption,
      queue: { type: 'string', multiple: true },
      concurrency: { type: 'string' },
      'shutdown-timeout-ms': { type: 'string' },
      'poll-interval-ms': { type: 'string' },
      'no-listen': { type: 'boolean' },
    });
    const [specifier] = positionalArgs(positionals, ['<module>']);
    const concurrency = parseInteger('--concurrency', values.concurrency, { min: 1, max: 1_000 });
    const shutdownTimeoutMs = parseInteger('--shutdown-timeout-ms', values['shutdown-timeout-ms'], {
      min: 0,
      max: 3_600_000,
    });
    const pollIntervalMs = parseInteger('--poll-interval-ms', values['poll-interval-ms'], {
      min: 10,
      max: 600_000,
    });
    const queues = values.queue;
    if (queues?.some((q) => q.trim() === '')) throw new UsageError('--queue must not be empty');
    const url = databaseUrl(values['database-url'], io.env);
    const [{ ConfigError, createWorker }, { pino }, { openDatabase }, { loadJobModule }] =
      await Promise.all([
        import('@skiplock/queue'),
        import('pino'),
        import('../database.js'),
        import('../load-jobs.js'),
      ]);
    const loaded = await loadJobModule(specifier!, io.cwd);

    const logger = pino(
      {
        name: 'skiplock',
        level: io.env.SKIPLOCK_LOG_LEVEL ?? 'info',
        redact: ['payload', 'password', 'connectionString', '*.payload', '*.password'],
      },
      logDestination(io),
    );
    const options = {
      ...loaded.workerOptions,
      ...(queues ? { queues } : {}),
      ...(concurrency !== undefined ? { concurrency } : {}),
      ...(shutdownTimeoutMs !== undefined ? { shutdownTimeoutMs } : {}),
      ...(pollIntervalMs !== undefined ? { pollIntervalMs } : {}),
      ...(values['no-listen'] ? { listen: false } : {}),
    };
    const db = await openDatabase(url, {
      // Room for the claim loop, heartbeats, settles, the sweeper and retention besides jobs.
      maxConnections: options.maxConnections ?? (options.concurrency ?? DEFAULT_CONCURRENCY) + 4,
      applicationName: 'skiplock-worker',
      onPoolError: (error) =>
        logger.warn({ reason: 'db_error', err: error.message }, 'idle connection error'),
    });
    let worker: Worker;
    try {
      worker = createWorker({ ...options, jobs: loaded.jobs, pool: db.pool, logger });
    } catch (error) {
      await db.close();
      if (error instanceof ConfigError) throw new UsageError(error.message);
      throw error;
    }
    const reconcilers = sagaReconcilers(loaded, logger);
    // The handlers go in before the line that tells a supervisor the worker is up: a SIGTERM sent
    // on seeing that line used to arrive first about one time in three and kill the process.
    const exitCode = untilSignal(worker, logger, shutdownTimeoutMs, reconcilers.stop, db.close);
    logger.info(
      { reason: 'jobs_loaded', module: specifier, jobTypes: loaded.jobs.map((j) => j.type) },
      'job definitions loaded',
    );
    await worker.start();
    reconcilers.start();
    return exitCode;
  },
};

/**
 * Resolves with the exit code once a SIGTERM or SIGINT has drained the worker: 0 after a clean
 * stop, 1 if stopping failed. A second signal exits at once with 1.
 */
function untilSignal(
  worker: Worker,
  logger: Logger,
  timeoutMs: number | undefined,
  stopReconcilers: () => Promise<void>,
  closePool: () => Promise<void>,
): Promise<number> {
  return new Promise((resolve) => {
    let received = 0;
    const onSignal = (signal: NodeJS.Signals) => {
      received += 1;
      if (received > 1) {
        logger.warn(
          { reason: 'forced_exit', signal },
          'second signal: exiting without waiting; running jobs return when their leases expire',
        );
        process.exit(1);
      }
      logger.info({ reason: 'signal', signal }, 'stopping: no new claims, draining running jobs');
      // Together: the worker stops claiming at once while a reconciler's pass ends, and both are
      // done before the pool closes and the process says it stopped.
      Promise.all([stopReconcilers(), worker.stop(timeoutMs === undefined ? {} : { timeoutMs })])
        .then(closePool)
        .then(
          () => resolve(0),
          (error: unknown) => {
            logger.error({ reason: 'stop_failed', err: (error as Error)?.message }, 'stop failed');
            resolve(1);
          },
        );
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });
}

/**
 * The reconcilers of the saga runtimes the module exports: started once the worker has started,
 * stopped with its drain. Without one, a saga whose step job died where no saga hook ran (the
 * last attempt's worker was killed and a worker without the saga's job types swept the lease, or
 * an operator cancelled the job) stays `running` for good (found in an audit); so a module that
 * runs saga jobs and exports no runtime is warned about.
 */
function sagaReconcilers(loaded: LoadedJobs, logger: Logger) {
  const runtimes = loaded.sagaRuntimes;
  if (runtimes.length === 0 && loaded.jobs.some((j) => j.type.startsWith('saga:'))) {
    logger.warn(
      { reason: 'saga_reconciler_missing' },
      'the module runs saga jobs but exports no saga runtime, so no reconciler moves on sagas ' +
        'whose job died where no saga hook ran: export the runtime beside its jobs ' +
        '(export const runtime = createSagaRuntime(...); export const jobs = runtime.jobs)',
    );
  }
  let stopped = false;
  return {
    start() {
      // A signal during the worker's start stopped them already: they stay stopped.
      if (stopped || runtimes.length === 0) return;
      for (const { runtime } of runtimes) runtime.reconciler.start();
      logger.info(
        { reason: 'saga_reconciler_started', exports: runtimes.map((r) => r.where) },
        'saga reconciler started',
      );
    },
    async stop() {
      stopped = true;
      await Promise.all(runtimes.map(({ runtime }) => runtime.reconciler.stop()));
    },
  };
}
