/**
 * A saga worker as a real OS process, for the saga SIGKILL test: a queue worker running the
 * `transfer` saga's jobs, its sweeper and the saga reconciler, all on short intervals so a killed
 * worker's jobs come back in about a second. Configured by DATABASE_URL and SAGA_WORKER_ID; logs
 * pino JSON lines on stdout (the parent waits for reason `started`).
 */
import { createWorker } from '@skiplock/queue';
import { createSagaRuntime } from '../../packages/saga/src/index.js';
import pg from 'pg';
import { pino } from 'pino';
import { createTransferSaga } from './saga-transfer.js';

const url = process.env.DATABASE_URL;
const workerId = process.env.SAGA_WORKER_ID;
if (!url || !workerId) throw new Error('saga-worker-process: set DATABASE_URL and SAGA_WORKER_ID');

const logger = pino({ level: 'warn', base: { pid: process.pid } });
const pool = new pg.Pool({ connectionString: url, max: 12, application_name: workerId });
pool.on('error', (error) => logger.warn({ reason: 'db_error', err: error.message }, 'pool error'));

const runtime = createSagaRuntime({
  pool,
  sagas: [createTransferSaga(pool)],
  logger,
  reconciler: { intervalMs: 300 },
});
const worker = createWorker({
  pool,
  jobs: runtime.jobs,
  logger,
  workerId,
  concurrency: 8,
  pollIntervalMs: 100,
  heartbeatIntervalMs: 200,
  // The sweeper retries with its own backoff, not the job's: keep it as short as the steps'.
  sweeper: { intervalMs: 200, backoff: { baseMs: 10, maxMs: 100 } },
  retention: false,
});
await worker.start();
runtime.reconciler.start();
// The parent waits for this line before it counts the process as up.
console.log(JSON.stringify({ reason: 'started', workerId }));

process.once('SIGTERM', () => {
  void (async () => {
    await worker.stop({ timeoutMs: 2_000 });
    await runtime.close();
    await pool.end();
    process.exit(0);
  })();
});
