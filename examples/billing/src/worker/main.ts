/**
 * One billing worker process, as the demo spawns it: reads `DATABASE_URL` and
 * `BILLING_WORKER_CONFIG`, claims saga and webhook jobs until SIGTERM/SIGINT, then drains.
 */
import { createWorker } from '@skiplock/queue';
import pg from 'pg';
import { pino } from 'pino';
import { createFaults } from '../faults.js';
import { createBillingSystem } from '../system.js';
import { DEMO_RETRY, workerConfigSchema } from './config.js';

const url = process.env.DATABASE_URL;
const rawConfig = process.env.BILLING_WORKER_CONFIG;
if (!url || !rawConfig) {
  console.error('billing worker: DATABASE_URL and BILLING_WORKER_CONFIG must be set');
  process.exit(2);
}
const config = workerConfigSchema.parse(JSON.parse(rawConfig));
const logger = pino({ name: 'billing-worker', level: config.logLevel });
const pool = new pg.Pool({
  connectionString: url,
  max: config.concurrency + 6,
  application_name: 'billing-worker',
});
pool.on('error', (error) =>
  logger.warn({ reason: 'db_error', err: error.message }, 'idle connection error'),
);

const system = createBillingSystem({
  pool,
  logger,
  rates: {
    declineRate: config.declineRate,
    transientRate: config.transientRate,
    lateConfirmRate: config.lateConfirmRate,
  },
  providerLatencyMs: config.providerLatencyMs,
  webhookDelayMs: config.webhookDelayMs,
  confirmTimeoutMs: config.confirmTimeoutMs,
  faults: createFaults({ transientSteps: ['issue-receipt'], transientRate: config.transientRate }),
  retry: DEMO_RETRY,
});

const worker = createWorker({
  pool,
  logger,
  jobs: system.jobs,
  concurrency: config.concurrency,
  pollIntervalMs: 250,
  sweeper: { intervalMs: 500, backoff: { baseMs: 50, maxMs: 500 } },
  retention: false,
});

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  logger.info({ reason: 'worker_stopping', signal }, 'billing worker stopping');
  await worker.stop({ timeoutMs: 10_000 });
  await system.runtime.close();
  await pool.end();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
// The demo talks to us over IPC; if it dies, stop instead of running on as an orphan.
process.on('disconnect', () => void shutdown('disconnect'));

await worker.start();
// Moves on sagas whose job died without its dead-letter hook (its last lease expired).
system.runtime.reconciler.start();
process.send?.({ type: 'ready', pid: process.pid });
