/**
 * One worker process of the concurrency-key crash test (concurrency-keys.test.ts): runs
 * `keyed.work` jobs, each sleeping 40-80 ms (long enough that 5,000 of them outlast a lease), with a 2 s lease and a fast sweeper and admitter, so
 * a SIGKILLed process's jobs come back within seconds. Logs `{ reason: 'started' }` when it runs.
 * With KEYED_JOB=rated it runs `rated.work` (rate-limit.test.ts) instead.
 */
import { createWorker } from '@skiplock/queue';
import pg from 'pg';
import { pino } from 'pino';
import { keyedJob, ratedJob } from './keyed-job.js';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('keyed-worker-process: set DATABASE_URL');
const pool = new pg.Pool({ connectionString: url, max: 6 });
pool.on('error', () => {});
// KEYED_JOB=rated runs the rate-limit test's job type instead.
const job =
  process.env.KEYED_JOB === 'rated'
    ? ratedJob(() => new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * 10)))
    : keyedJob(
        () => new Promise((resolve) => setTimeout(resolve, 40 + Math.floor(Math.random() * 41))),
      );
const worker = createWorker({
  pool,
  jobs: [job],
  queues: ['keyed'],
  concurrency: 8,
  heartbeatIntervalMs: 300,
  sweeper: { intervalMs: 300 },
  retention: false,
  admitter: { intervalMs: 250 },
  logger: pino({ level: 'info' }),
});
process.on('SIGTERM', () => void worker.stop().then(() => pool.end()));
await worker.start();
