/**
 * A saga worker in a process of its own, for the crash tests' worker scripts: a queue worker
 * running the sagas' jobs, its sweeper and the saga reconciler, on short intervals so a killed
 * worker's jobs come back in about a second. Logs `{ reason: 'started' }` once up (the parent
 * waits for it) and stops cleanly on SIGTERM.
 */
import { createWorker } from '@skiplock/queue';
import { createSagaRuntime, type AnySagaDefinition } from '../../packages/saga/src/index.js';
import pg from 'pg';
import { pino } from 'pino';

export async function startSagaWorker(options: {
  url: string;
  workerId: string;
  sagas: (pool: pg.Pool) => AnySagaDefinition[];
  concurrency?: number;
  pollIntervalMs?: number;
}) {
  const { url, workerId } = options;
  const logger = pino({ level: 'warn', base: { pid: process.pid } });
  const pool = new pg.Pool({ connectionString: url, max: 16, application_name: workerId });
  pool.on('error', (error) =>
    logger.warn({ reason: 'db_error', err: error.message }, 'pool error'),
  );
  const runtime = createSagaRuntime({
    pool,
    sagas: options.sagas(pool),
    logger,
    reconciler: { intervalMs: 300 },
  });
  const worker = createWorker({
    pool,
    jobs: runtime.jobs,
    logger,
    workerId,
    concurrency: options.concurrency ?? 8,
    pollIntervalMs: options.pollIntervalMs ?? 100,
    heartbeatIntervalMs: 200,
    // The sweeper retries with its own backoff, not the job's: keep it as short as the steps'.
    sweeper: { intervalMs: 200, backoff: { baseMs: 10, maxMs: 100 } },
    retention: false,
  });
  await worker.start();
  runtime.reconciler.start();
  console.log(JSON.stringify({ reason: 'started', workerId }));
  process.once('SIGTERM', () => {
    void (async () => {
      await worker.stop({ timeoutMs: 2_000 });
      await runtime.close();
      await pool.end();
      process.exit(0);
    })();
  });
  return { pool, runtime, worker };
}
