import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, createWorker, defineJob } from '@skiplock/queue';
import { captureLogs, useTestDatabase } from '../support/db.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { waitFor } from '../support/wait.js';

const db = await useTestDatabase();

describe('stopping a worker whose database hangs', () => {
  // pausedMs 100: the worker polls every 20 ms, so by then its loop waits on a claim that the
  // frozen database never answers (stop() used to wait on that loop for good).
  it.each([0, 100])(
    'stop() returns within its deadline plus grace, and the lease keeps the job safe (%i ms after the freeze)',
    async (pausedMs) => {
      const target = new URL(db.url);
      const proxy = await startTcpProxy({
        host: target.hostname,
        port: Number(target.port || 5432),
      });
      const logs = captureLogs();
      let started = 0;
      const endless = defineJob({
        type: 'hangs',
        payload: z.object({}),
        leaseMs: 5_000,
        handler: (_p, ctx) =>
          new Promise<void>((_resolve, reject) => {
            started += 1;
            ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error));
          }),
      });
      const pool = new pg.Pool({ connectionString: proxy.urlThrough(db.url), max: 4 });
      pool.on('error', () => {});
      const worker = createWorker({
        pool,
        jobs: [endless],
        logger: logs.logger,
        listen: false,
        sweeper: false,
        retention: false,
        pollIntervalMs: 20,
      });
      try {
        const { id } = await createClient({ pool: db.pool, logger: logs.logger }).enqueue(
          endless,
          {},
        );
        await worker.start();
        await waitFor(() => started === 1);
        proxy.freeze();
        await new Promise((resolve) => setTimeout(resolve, pausedMs));
        const before = performance.now();
        await worker.stop({ timeoutMs: 100, graceMs: 500 });
        const tookMs = performance.now() - before;
        expect(tookMs).toBeLessThan(5_000);
        expect(logs.reasons()).toContain('stop_timeout');
        // The release never reached the database: the job is still leased and will be swept.
        const { rows } = await db.pool.query<{ status: string; attempts: number }>(
          'SELECT status::text, attempts FROM skiplock.jobs WHERE id = $1',
          [id],
        );
        expect(rows[0]).toEqual({ status: 'processing', attempts: 1 });
      } finally {
        proxy.sever();
        await proxy.close();
        await pool.end().catch(() => {});
      }
    },
  );
});
