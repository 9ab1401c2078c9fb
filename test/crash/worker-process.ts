/**
 * One skiplock worker as a real OS process, for the crash tests: they SIGKILL it, restart its
 * database under it, terminate its connections, and read what it did from `crash.executions`.
 *
 * The tests bundle it and run it with plain `node` (see test/support/bundle.ts); by hand,
 * `node --import tsx test/crash/worker-process.ts` runs it too. It is configured by environment:
 * DATABASE_URL (required), CRASH_WORKER_ID (required), CRASH_CONCURRENCY (8), CRASH_LEASE_MS
 * (2000), CRASH_HEARTBEAT_MS (300), CRASH_SWEEP_INTERVAL_MS (500), CRASH_JOB_MS ("10-40", a
 * handler's duration range), CRASH_LISTEN ("1"), CRASH_POLL_MS (250), CRASH_SHUTDOWN_MS (5000),
 * CRASH_MAX_CONNECTIONS (5), CRASH_ASYNC_COMMIT ("true", the worker's `asyncCommit`).
 * It logs pino JSON lines on stdout; the parent reads them for reasons such as `lock_lost`.
 */
import { createWorker } from '@skiplock/queue';
import pg from 'pg';
import { pino } from 'pino';
import { crashJob, type CrashPayload } from './crash-job.js';

function env(name: string, fallback?: string): string {
  const value = process.env[name] ?? fallback;
  if (value === undefined || value === '') {
    throw new Error(`worker-process: set ${name}`);
  }
  return value;
}

function intEnv(name: string, fallback: number): number {
  const raw = env(name, String(fallback));
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) {
    throw new Error(`worker-process: ${name} must be a non-negative integer, got "${raw}"`);
  }
  return value;
}

function rangeEnv(name: string, fallback: string): [number, number] {
  const raw = env(name, fallback);
  const match = /^(\d+)-(\d+)$/.exec(raw);
  if (!match || Number(match[1]) > Number(match[2])) {
    throw new Error(`worker-process: ${name} must look like "10-40", got "${raw}"`);
  }
  return [Number(match[1]), Number(match[2])];
}

const url = env('DATABASE_URL');
const workerId = env('CRASH_WORKER_ID');
const [minJobMs, maxJobMs] = rangeEnv('CRASH_JOB_MS', '10-40');
const logger = pino({ level: process.env.CRASH_LOG_LEVEL ?? 'info', base: { pid: process.pid } });

// Recording goes through a pool of its own, with its own application_name, so that tests which
// terminate the worker's connections do not also erase the evidence of what it ran.
const recorder = new pg.Pool({ connectionString: url, max: 2, application_name: 'crash-recorder' });
recorder.on('error', (error) =>
  logger.warn({ reason: 'recorder_error', err: error.message }, 'recorder connection error'),
);

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    function onAbort() {
      clearTimeout(timer);
      reject(signal.reason);
    }
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

const job = crashJob({
  leaseMs: intEnv('CRASH_LEASE_MS', 2_000),
  async handler(payload: CrashPayload, ctx) {
    // One row per handler run, written before any work: a run cut short by SIGKILL still shows.
    await recorder.query(
      'INSERT INTO crash.executions (job_id, attempt, worker_id, pid) VALUES ($1, $2, $3, $4)',
      [ctx.job.id, ctx.job.attempt, workerId, process.pid],
    );
    await pause(minJobMs + Math.floor(Math.random() * (maxJobMs - minJobMs + 1)), ctx.signal);
    if (payload.mode === 'tx') {
      // The effect commits with the fenced completion or not at all, so it happens exactly once
      // per job however often the attempt is cut off. The pause holds the transaction open, idle,
      // which is where a terminated connection used to have no error listener.
      await ctx.completeWith(async (tx) => {
        await tx.query(
          'INSERT INTO crash.effects (job_id, attempt, worker_id) VALUES ($1, $2, $3)',
          [ctx.job.id, ctx.job.attempt, workerId],
        );
        await pause(minJobMs, ctx.signal);
      });
    }
  },
});

const sweepIntervalMs = intEnv('CRASH_SWEEP_INTERVAL_MS', 500);
const worker = createWorker({
  connectionString: url,
  // A few connections are plenty (claims, batched completions, heartbeats, sweeps) and keep
  // several processes within a small server's max_connections.
  maxConnections: intEnv('CRASH_MAX_CONNECTIONS', 5),
  jobs: [job],
  workerId,
  logger,
  concurrency: intEnv('CRASH_CONCURRENCY', 8),
  heartbeatIntervalMs: intEnv('CRASH_HEARTBEAT_MS', 300),
  pollIntervalMs: intEnv('CRASH_POLL_MS', 250),
  listen: env('CRASH_LISTEN', '1') === '1',
  asyncCommit: env('CRASH_ASYNC_COMMIT', 'true') === 'true',
  shutdownTimeoutMs: intEnv('CRASH_SHUTDOWN_MS', 5_000),
  // Taken-back jobs come back within a fraction of a second, so a run takes seconds, not minutes.
  sweeper:
    sweepIntervalMs === 0
      ? false
      : { intervalMs: sweepIntervalMs, backoff: { baseMs: 50, maxMs: 500 } },
  retention: false,
});

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  logger.info({ reason: 'signal', signal }, 'stopping');
  await worker.stop();
  await recorder.end();
  const cpu = process.cpuUsage();
  logger.info({ reason: 'exit', cpuMs: Math.round((cpu.user + cpu.system) / 1000) }, 'exiting');
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));

await worker.start();
