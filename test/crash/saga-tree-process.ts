/**
 * A worker process of the child-saga crash test (saga-children.test.ts): runs `order_tree` and
 * its child `parcel`, with a sweeper and the reconciler on short intervals so a SIGKILLed
 * worker's jobs come back in about a second. Logs `{ reason: 'started' }` when up.
 */
import { createWorker } from '@skiplock/queue';
import { createSagaRuntime } from '../../packages/saga/src/index.js';
import pg from 'pg';
import { pino } from 'pino';
import { createTreeSagas } from './saga-tree.js';

const url = process.env.DATABASE_URL;
const workerId = process.env.SAGA_WORKER_ID;
if (!url || !workerId) throw new Error('saga-tree-process: set DATABASE_URL and SAGA_WORKER_ID');

const logger = pino({ level: 'warn', base: { pid: process.pid } });
const pool = new pg.Pool({ connectionString: url, max: 12, application_name: workerId });
pool.on('error', (error) => logger.warn({ reason: 'db_error', err: error.message }, 'pool error'));

const runtime = createSagaRuntime({
  pool,
  sagas: [createTreeSagas(pool).order],
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
