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

  it('with the claim loop and the release of its buffer hung at once, stop() waits one grace for both, then the deadline, then one grace', async () => {
    const target = new URL(db.url);
    const proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
    const logs = captureLogs();
    let started = 0;
    let quick = 0;
    const jobs = defineJob({
      type: 'hangs-or-not',
      payload: z.object({ hang: z.boolean() }),
      leaseMs: 5_000,
      handler: (p, ctx) => {
        if (!p.hang) return void (quick += 1);
        started += 1;
        return new Promise<void>((_resolve, reject) => {
          ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error));
        });
      },
    });
    const pool = new pg.Pool({ connectionString: proxy.urlThrough(db.url), max: 4 });
    pool.on('error', () => {});
    const client = createClient({ pool: db.pool, logger: logs.logger });
    const worker = createWorker({
      pool,
      jobs: [jobs],
      logger: logs.logger,
      concurrency: 1,
      listen: false,
      sweeper: false,
      retention: false,
      pollIntervalMs: 20,
    });
    try {
      await worker.start();
      // Quick handlers first: the worker then claims beyond its one slot (its prefetch), so
      // jobs wait in its buffer behind the one that hangs, and its loop goes on claiming.
      await client.enqueueMany(
        jobs,
        Array.from({ length: 20 }, () => ({ payload: { hang: false } })),
      );
      await waitFor(() => quick === 20);
      await client.enqueue(jobs, { hang: true });
      await waitFor(() => started === 1);
      await client.enqueueMany(
        jobs,
        Array.from({ length: 5 }, () => ({ payload: { hang: false } })),
      );
      await waitFor(() => worker.inFlight === 6);
      proxy.freeze();
      // Polling every 20 ms, the loop now waits on a claim the frozen database never answers.
      await new Promise((resolve) => setTimeout(resolve, 100));
      const graceMs = 2_000;
      const timeoutMs = 100;
      const before = performance.now();
      await worker.stop({ timeoutMs, graceMs });
      const tookMs = performance.now() - before;
      // One grace for the loop and the release together, the deadline, one grace to close: about
      // 4,100 ms. With a grace for each wait it took one more (6,100 ms). A grace of 2 s leaves a
      // loaded machine's timers a second of lag over the three waits and still tells them apart.
      expect(tookMs).toBeGreaterThanOrEqual(2 * graceMs);
      expect(tookMs).toBeLessThan(2 * graceMs + timeoutMs + 1_000);
      expect(quick).toBe(20);
      expect(logs.reasons()).toContain('stop_timeout');
      // Nothing the frozen database was sent landed: every job is still leased, for the sweeper.
      const { rows } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM skiplock.jobs WHERE job_type = 'hangs-or-not' AND status = 'processing'`,
      );
      expect(rows[0]!.n).toBe(6);
    } finally {
      proxy.sever();
      await proxy.close();
      await pool.end().catch(() => {});
    }
  });

  it('with only its LISTEN connection hung, stop() still stops the sweeper and the rest', async () => {
    const target = new URL(db.url);
    const proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
    const logs = captureLogs();
    const idle = defineJob({ type: 'hangs-listening', payload: z.object({}), handler: () => {} });
    const pool = new pg.Pool({ connectionString: proxy.urlThrough(db.url), max: 4 });
    pool.on('error', () => {});
    const client = createClient({ pool: db.pool, logger: logs.logger });
    // The LISTEN connection goes through the proxy (it takes the pool's settings) and is the one
    // frozen: a close it sends is never answered, as on a network that dropped it. The loop naps
    // (pollIntervalMs), so no claim is on it to cut short. The sweeper runs every 100 ms on the
    // pool, which still reaches the database: one left running shows at once.
    const worker = createWorker({
      pool,
      jobs: [idle],
      logger: logs.logger,
      listen: true,
      sweeper: { intervalMs: 100 },
      retention: false,
      pollIntervalMs: 600_000,
    });
    try {
      await worker.start();
      // Up, and done with its first claim (the connection's "work may have arrived" wakes the
      // loop, which claims there): frozen before that ends, the close would find a query running
      // and drop the socket at once instead of waiting.
      await waitFor(async () => {
        const { rows } = await db.pool.query(
          `SELECT 1 FROM pg_stat_activity WHERE application_name = 'skiplock-listener'
             AND datname = current_database() AND state = 'idle'
             AND query LIKE '%FOR UPDATE SKIP LOCKED%'`,
        );
        return rows.length === 1;
      });
      // The loop then naps for pollIntervalMs; its next turn is not before stop().
      await new Promise((resolve) => setTimeout(resolve, 50));
      proxy.freezeConnections('skiplock-listener');
      await worker.stop({ timeoutMs: 100, graceMs: 500 });
      expect(logs.reasons()).toContain('stop_timeout');

      // A job whose lease passed, held by a worker that is gone: a sweeper still running after
      // stop() would take it back within its interval.
      const { id } = await client.enqueue(idle, {});
      await db.pool.query(
        `UPDATE skiplock.jobs SET status = 'processing', locked_by = 'gone', attempts = 1,
           lease_expires_at = now() - interval '1 minute' WHERE id = $1`,
        [id],
      );
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const { rows } = await db.pool.query<{ status: string }>(
        'SELECT status::text FROM skiplock.jobs WHERE id = $1',
        [id],
      );
      expect(rows[0]!.status).toBe('processing');
    } finally {
      proxy.sever();
      await proxy.close();
      await pool.end().catch(() => {});
    }
  });
});
