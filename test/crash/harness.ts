import { createDatabase } from '@skiplock/devdb';
import { createClient, migrate } from '@skiplock/queue';
import pg from 'pg';
import { pino } from 'pino';
import { bundleForNode } from '../support/bundle.js';
import { spawnNode, type ChildHandle } from '../support/processes.js';
import { crashJob } from './crash-job.js';

const workerScript = new URL('./worker-process.ts', import.meta.url);

/** Builds the worker script once, so each start costs a fraction of a second (see bundleForNode). */
export const prepareWorkerScript = () => bundleForNode(workerScript);

/** The tables where worker processes record what they ran; they live beside skiplock's own. */
export async function createCrashTables(pool: pg.Pool): Promise<void> {
  await pool.query(`
    CREATE SCHEMA IF NOT EXISTS crash;
    CREATE TABLE IF NOT EXISTS crash.executions (
      id bigserial PRIMARY KEY,
      job_id bigint NOT NULL,
      attempt int NOT NULL,
      worker_id text NOT NULL,
      pid int NOT NULL,
      started_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE INDEX IF NOT EXISTS executions_job_idx ON crash.executions (job_id, attempt);
    CREATE TABLE IF NOT EXISTS crash.effects (
      id bigserial PRIMARY KEY,
      job_id bigint NOT NULL,
      attempt int NOT NULL,
      worker_id text NOT NULL
    );`);
}

/** Enqueues `count` crash jobs in bulk statements; returns their ids. */
export async function enqueueCrashJobs(
  pool: pg.Pool,
  count: number,
  mode: (n: number) => 'plain' | 'tx' = () => 'plain',
): Promise<string[]> {
  const client = createClient({ pool, logger: pino({ level: 'silent' }) });
  const def = crashJob();
  const ids: string[] = [];
  for (let start = 0; start < count; start += 1_000) {
    const items = Array.from({ length: Math.min(1_000, count - start) }, (_, i) => ({
      payload: { n: start + i, mode: mode(start + i) },
    }));
    const results = await client.enqueueMany(def, items);
    ids.push(...results.map((r) => r.id));
  }
  return ids;
}

export interface WorkerProcessOptions {
  concurrency?: number;
  leaseMs?: number;
  heartbeatMs?: number;
  sweepIntervalMs?: number;
  jobMs?: string;
  listen?: boolean;
  pollMs?: number;
  /** The worker's `asyncCommit` (its default, true, when not given). */
  asyncCommit?: boolean;
}

/** Starts one worker process and resolves once its loop runs. */
export async function startWorkerProcess(
  url: string,
  workerId: string,
  options: WorkerProcessOptions = {},
): Promise<ChildHandle> {
  const handle = spawnNode(workerId, await prepareWorkerScript(), {
    DATABASE_URL: url,
    CRASH_WORKER_ID: workerId,
    CRASH_CONCURRENCY: options.concurrency?.toString(),
    CRASH_LEASE_MS: options.leaseMs?.toString(),
    CRASH_HEARTBEAT_MS: options.heartbeatMs?.toString(),
    CRASH_SWEEP_INTERVAL_MS: options.sweepIntervalMs?.toString(),
    CRASH_JOB_MS: options.jobMs,
    CRASH_LISTEN: options.listen === false ? '0' : '1',
    CRASH_POLL_MS: options.pollMs?.toString(),
    CRASH_ASYNC_COMMIT: options.asyncCommit === undefined ? undefined : String(options.asyncCommit),
    SKIPLOCK_LOG_LEVEL: undefined,
  });
  await handle.waitForLine((l) => l.reason === 'started', 60_000);
  return handle;
}

export interface WorkerFleet {
  workers: ChildHandle[];
  /** Exits nobody asked for (not SIGTERM, not 0), with each one's last stderr lines. */
  unexpectedExits: string[];
  /** Throws at once when a worker died on its own, so a wait fails fast with the reason. */
  assertAlive(): void;
}

/** Short leases and quick sweeps, so faults are recovered within a test's minute. */
export const FAULT_TEST_WORKERS: WorkerProcessOptions = {
  concurrency: 8,
  leaseMs: 2_000,
  heartbeatMs: 300,
  sweepIntervalMs: 300,
  jobMs: '5-25',
};

/** Starts `count` worker processes named `<prefix><n>` and records any exit nobody asked for. */
export async function startWorkerFleet(
  url: string,
  prefix: string,
  count: number,
  options: WorkerProcessOptions,
): Promise<WorkerFleet> {
  const workers = await Promise.all(
    Array.from({ length: count }, (_, i) => startWorkerProcess(url, `${prefix}${i + 1}`, options)),
  );
  const unexpectedExits: string[] = [];
  for (const w of workers) {
    void w.exited.then(({ code, signal }) => {
      if (signal !== 'SIGTERM' && code !== 0) {
        unexpectedExits.push(`${w.name} exited ${code ?? signal}: ${w.stderrTail()}`);
      }
    });
  }
  return {
    workers,
    unexpectedExits,
    assertAlive() {
      if (unexpectedExits.length > 0) throw new Error(unexpectedExits.join('\n'));
    },
  };
}

/** Sends SIGTERM and resolves with the exit code (null when a signal ended it instead). */
export async function stopWorkerProcess(handle: ChildHandle): Promise<number | null> {
  handle.kill('SIGTERM');
  const { code } = await handle.exited;
  return code;
}

/**
 * A fresh database on `serverUrl` for a server-fault test: migrated, with the crash tables and
 * `jobs` crash jobs (even ones complete with `completeWith`, odd ones plainly). The pool ignores
 * connection errors: the test takes the server away under it.
 */
export async function prepareCrashDrain(
  serverUrl: string,
  name: string,
  jobs: number,
): Promise<{ url: string; pool: pg.Pool }> {
  const url = await createDatabase(serverUrl, name);
  await migrate({ connectionString: url, logger: pino({ level: 'silent' }) });
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => {});
  await createCrashTables(pool);
  await enqueueCrashJobs(pool, jobs, (n) => (n % 2 === 0 ? 'tx' : 'plain'));
  return { url, pool };
}

/**
 * Completed jobs so far, failing at once when a worker of `fleet` died on its own. While the
 * server is down the read fails too; that only means "not yet" (undefined).
 */
export async function completedCount(
  pool: pg.Pool,
  fleet: WorkerFleet,
): Promise<number | undefined> {
  fleet.assertAlive();
  return (await countByStatus(pool).catch(() => ({}) as Record<string, number>)).completed;
}

export async function countByStatus(pool: pg.Pool): Promise<Record<string, number>> {
  const { rows } = await pool.query<{ status: string; n: number }>(
    'SELECT status::text, count(*)::int AS n FROM skiplock.jobs GROUP BY status',
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

export interface EarlierExecution {
  jobId: string;
  attempt: number;
  workerId: string;
  /** Reasons the job's error history records for this attempt. */
  reasons: string[];
}

export interface Outcome {
  byStatus: Record<string, number>;
  executions: number;
  /** (job, attempt) pairs run more than once: a claim handed one attempt to two handlers. */
  attemptsRunTwice: number;
  /** Completed jobs with no execution of their final attempt by the worker that completed them. */
  completedWithoutFinalRun: number;
  /** Jobs with more than one execution. */
  jobsRunMoreThanOnce: number;
  /** Every execution that was not the job's final, completing attempt. */
  earlier: EarlierExecution[];
  /**
   * `tx` jobs whose `completeWith` effect did not commit exactly once, with the completing attempt
   * and worker.
   */
  wrongEffects: number;
}

/** Reads what happened to every job, from the jobs table and the workers' execution records. */
export async function readOutcome(pool: pg.Pool): Promise<Outcome> {
  const byStatus = await countByStatus(pool);
  const one = async (text: string) => (await pool.query<{ n: number }>(text)).rows[0]!.n;
  const executions = await one('SELECT count(*)::int AS n FROM crash.executions');
  const attemptsRunTwice = await one(`
    SELECT count(*)::int AS n FROM (
      SELECT 1 FROM crash.executions GROUP BY job_id, attempt HAVING count(*) > 1) d`);
  const completedWithoutFinalRun = await one(`
    SELECT count(*)::int AS n FROM skiplock.jobs j
    WHERE j.status = 'completed' AND NOT EXISTS (
      SELECT 1 FROM crash.executions e
      WHERE e.job_id = j.id AND e.attempt = j.attempts AND e.worker_id = j.locked_by)`);
  const jobsRunMoreThanOnce = await one(`
    SELECT count(*)::int AS n FROM (
      SELECT 1 FROM crash.executions GROUP BY job_id HAVING count(*) > 1) d`);
  const wrongEffects = await one(`
    SELECT count(*)::int AS n FROM skiplock.jobs j
    WHERE (j.payload->>'mode' = 'tx' AND (
             SELECT count(*) FROM crash.effects e
             WHERE e.job_id = j.id AND e.attempt = j.attempts AND e.worker_id = j.locked_by) <> 1)
       OR (SELECT count(*) FROM crash.effects e WHERE e.job_id = j.id) > 1`);
  const { rows } = await pool.query<{
    job_id: string;
    attempt: number;
    worker_id: string;
    reasons: string[] | null;
  }>(`
    SELECT e.job_id::text, e.attempt, e.worker_id,
           (SELECT array_agg(x->>'reason') FROM jsonb_array_elements(j.errors) x
            WHERE (x->>'attempt')::int = e.attempt) AS reasons
    FROM crash.executions e JOIN skiplock.jobs j ON j.id = e.job_id
    WHERE e.attempt < j.attempts OR j.status <> 'completed'
    ORDER BY e.job_id, e.attempt`);
  return {
    byStatus,
    executions,
    attemptsRunTwice,
    completedWithoutFinalRun,
    jobsRunMoreThanOnce,
    wrongEffects,
    earlier: rows.map((r) => ({
      jobId: r.job_id,
      attempt: r.attempt,
      workerId: r.worker_id,
      reasons: r.reasons ?? [],
    })),
  };
}
