import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob, serveMetrics } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { quiet, testWorker } from './fixtures.js';

const db = await useTestDatabase();

describe('metrics endpoint', () => {
  it('serves worker counters and queue depth in the Prometheus text format', async () => {
    const client = createClient({ pool: db.pool, logger: quiet });
    const ok = defineJob({
      type: 'm-ok',
      queue: 'metrics',
      payload: z.object({}),
      handler: async () => {},
    });
    const bad = defineJob({
      type: 'm-bad',
      queue: 'metrics',
      payload: z.object({}),
      maxAttempts: 1,
      handler: async () => {
        throw new Error('x');
      },
    });
    await client.enqueueMany(ok, [{ payload: {} }, { payload: {} }]);
    await client.enqueue(bad, {});
    await client.enqueue(ok, {}, { delayMs: 60_000 });
    const worker = testWorker(db.pool, [ok, bad]);
    await worker.runOnce();
    const served = await serveMetrics({ metrics: [worker.metrics], client, port: 0 });
    try {
      const body = await (await fetch(served.url)).text();
      expect(body).toContain('skiplock_jobs_completed_total 2');
      expect(body).toContain('skiplock_jobs_dead_total{reason="max_attempts"} 1');
      expect(body).toContain('skiplock_queue_depth{queue="metrics",status="completed"} 2');
      expect(body).toContain('skiplock_queue_depth{queue="metrics",status="pending"} 1');
      expect(body).toContain('skiplock_scrape_error 0');
      expect((await fetch(served.url.replace('/metrics', '/other'))).status).toBe(404);
    } finally {
      await served.close();
    }
  });
});
