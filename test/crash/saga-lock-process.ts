/**
 * One process of the lock-key test (saga-lock-key.test.ts): a saga worker and reconciler for
 * `account_lock`, and, at the moment START_AT (epoch ms, the same for every process), a burst of
 * SAGAS starts over KEYS accounts, all at once on its own connections, so starts with one key
 * from several processes meet in PostgreSQL. Logs `started` when up and `starts_done` after the
 * burst.
 */
import { createWorker } from '@skiplock/queue';
import { createSagaRuntime } from '../../packages/saga/src/index.js';
import pg from 'pg';
import { pino } from 'pino';
import { lockedSaga } from './saga-lock.js';

const url = process.env.DATABASE_URL;
const name = process.env.PROC;
const sagas = Number(process.env.SAGAS);
const keys = Number(process.env.KEYS);
const startAt = Number(process.env.START_AT);
if (!url || !name || !sagas || !keys || !startAt) {
  throw new Error('saga-lock-process: set DATABASE_URL, PROC, SAGAS, KEYS and START_AT');
}
const logger = pino({ level: 'warn', base: { pid: process.pid } });
const pool = new pg.Pool({ connectionString: url, max: 16, application_name: name });
pool.on('error', (error) => logger.warn({ reason: 'db_error', err: error.message }, 'pool error'));
const runtime = createSagaRuntime({
  pool,
  sagas: [lockedSaga],
  logger,
  reconciler: { intervalMs: 300 },
});
const worker = createWorker({
  pool,
  jobs: runtime.jobs,
  logger,
  workerId: name,
  concurrency: 6,
  pollIntervalMs: 50,
  heartbeatIntervalMs: 200,
  sweeper: { intervalMs: 200, backoff: { baseMs: 10, maxMs: 100 } },
  retention: false,
});
await worker.start();
runtime.reconciler.start();
console.log(JSON.stringify({ reason: 'started' }));
await new Promise((resolve) => setTimeout(resolve, Math.max(0, startAt - Date.now())));
await Promise.all(
  Array.from({ length: sagas }, (_, i) =>
    runtime.start(lockedSaga, {
      id: `${name}-${i}`,
      input: { account: `acct-${i % keys}`, fail: i % 7 === 3 },
    }),
  ),
);
console.log(JSON.stringify({ reason: 'starts_done' }));

process.once('SIGTERM', () => {
  void (async () => {
    await worker.stop({ timeoutMs: 2_000 });
    await runtime.close();
    await pool.end();
    process.exit(0);
  })();
});
