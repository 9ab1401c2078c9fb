import { defineJob } from '@skiplock/queue';
import { z } from 'zod';

/**
 * The job type of the concurrency-key crash test: `tenant` names the key, limit 2. The test
 * enqueues it; keyed-worker-process.ts runs it with a handler that sleeps.
 */
export function keyedJob(handler: () => Promise<void> = async () => {}, leaseMs = 2_000) {
  return defineJob({
    type: 'keyed.work',
    queue: 'keyed',
    payload: z.object({ tenant: z.number().int(), n: z.number().int() }),
    concurrencyKey: (p) => `tenant:${p.tenant}`,
    concurrencyLimit: 2,
    maxAttempts: 100,
    leaseMs,
    backoff: { baseMs: 20, maxMs: 200 },
    handler,
  });
}

/**
 * The job type of the rate-limit test: at most 50 starts per second of each `tenant`, across
 * every worker process. Handlers take 5-15 ms, far below the limit's pace.
 */
export function ratedJob(handler: () => Promise<void> = async () => {}) {
  return defineJob({
    type: 'rated.work',
    queue: 'keyed',
    payload: z.object({ tenant: z.number().int(), n: z.number().int() }),
    rateLimit: { limit: 50, intervalMs: 1_000, key: (p) => `tenant:${p.tenant}` },
    maxAttempts: 100,
    handler,
  });
}
