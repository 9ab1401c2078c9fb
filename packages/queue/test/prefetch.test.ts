import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob } from '../src/index.js';
import { NOTIFY_CHANNEL } from '../src/listener.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { countByStatus, quiet, testWorker } from './fixtures.js';
import { metricValue } from '../../../test/support/metrics.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

describe('claiming ahead into the local buffer', () => {
  it('claims more than its free slots once handlers prove quick, and still runs each job once', async () => {
    const runs = new Map<string, number>();
    const quick = defineJob({
      type: 'quick',
      queue: 'prefetch',
      payload: z.object({ n: z.number() }),
      handler: async (_p, ctx) => void runs.set(ctx.job.id, (runs.get(ctx.job.id) ?? 0) + 1),
    });
    await client.enqueueMany(
      quick,
      Array.from({ length: 2_000 }, (_, n) => ({ payload: { n } })),
    );
    const worker = testWorker(db.pool, [quick], { concurrency: 2, pollIntervalMs: 20 });
    await worker.start();
    await waitFor(async () => (await countByStatus(db.pool, 'prefetch')).completed === 2_000, {
      timeoutMs: 60_000,
    });
    await worker.stop();
    expect(runs.size).toBe(2_000);
    expect([...runs.values()].every((n) => n === 1)).toBe(true);
    const perClaim =
      (await metricValue(worker.metrics, 'skiplock_claim_batch_size_sum')) /
      (await metricValue(worker.metrics, 'skiplock_claim_batch_size_count'));
    expect(perClaim).toBeGreaterThan(2);
  });

  it('keeps buffered jobs leased and hands them back on stop without spending an attempt', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let started = 0;
    const mixed = defineJob({
      type: 'mixed',
      queue: 'buffered',
      payload: z.object({ slow: z.boolean() }),
      handler: async ({ slow }) => {
        if (!slow) return;
        started += 1;
        await gate;
      },
    });
    const worker = testWorker(db.pool, [mixed], { concurrency: 2, pollIntervalMs: 20 });
    // Teach the worker its handlers are quick, so that it starts claiming ahead.
    await client.enqueueMany(
      mixed,
      Array.from({ length: 50 }, () => ({ payload: { slow: false } })),
    );
    await worker.start();
    await waitFor(async () => (await countByStatus(db.pool, 'buffered')).completed === 50);
    await client.enqueueMany(
      mixed,
      Array.from({ length: 20 }, () => ({ payload: { slow: true } })),
    );
    await waitFor(async () => ((await countByStatus(db.pool, 'buffered')).processing ?? 0) > 2, {
      what: 'jobs claimed ahead',
    });
    await waitFor(() => started === 2);
    expect(await worker.heartbeat()).toMatchObject({ lost: 0 });
    const { rows: leased } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM skiplock.jobs WHERE status = 'processing' AND lease_expires_at > now()`,
    );
    expect(leased[0]!.n).toBeGreaterThan(2);
    // The hand-back notifies the queue, so that listening workers take the jobs at once.
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const notified: string[] = [];
    listener.on('notification', (m) => notified.push(m.payload ?? ''));
    await listener.query(`LISTEN ${NOTIFY_CHANNEL}`);
    const stopping = worker.stop({ timeoutMs: 5_000 });
    release();
    await stopping;
    try {
      await waitFor(() => notified.includes('buffered'), { what: "the hand-back's notification" });
    } finally {
      await listener.end();
    }
    const { rows } = await db.pool.query<{ status: string; attempts: number; n: number }>(
      `SELECT status::text, attempts, count(*)::int AS n FROM skiplock.jobs
       WHERE payload->>'slow' = 'true' GROUP BY 1, 2 ORDER BY 1`,
    );
    // The two that ran finished; every buffered one is pending again with no attempt spent.
    expect(rows.find((r) => r.status === 'completed')).toMatchObject({ attempts: 1, n: 2 });
    expect(rows.find((r) => r.status === 'pending')).toMatchObject({ attempts: 0, n: 18 });
    expect(started).toBe(2);
    // Counted as released, unstarted, under the job's own labels.
    const released = { queue: 'buffered', job_type: 'mixed', outcome: 'released' };
    expect(
      await metricValue(worker.metrics, 'skiplock_job_outcomes_total', {
        ...released,
        reason: 'not_started',
      }),
    ).toBe(18);
    expect(
      await metricValue(worker.metrics, 'skiplock_job_outcomes_total', {
        job_type: 'mixed',
        outcome: 'completed',
      }),
    ).toBe(52);
  });

  it('holds at most maxPrefetchBytes of stored payload in the buffer', async () => {
    const big = (queue: string) =>
      defineJob({
        type: `big-${queue}`,
        queue,
        payload: z.object({ s: z.string() }),
        handler: async () => {},
      });
    const perClaim = async (queue: string, options: { maxPrefetchBytes?: number }) => {
      const def = big(queue);
      await client.enqueueMany(
        def,
        Array.from({ length: 600 }, () => ({
          payload: { s: randomBytes(1_500).toString('base64') },
        })),
      );
      const { rows } = await db.pool.query<{ avg: number }>(
        `SELECT avg(octet_length(payload::text))::float8 AS avg FROM skiplock.jobs WHERE queue = $1`,
        [queue],
      );
      const worker = testWorker(db.pool, [def], { concurrency: 2, pollIntervalMs: 20, ...options });
      await worker.start();
      await waitFor(async () => (await countByStatus(db.pool, queue)).completed === 600, {
        timeoutMs: 60_000,
      });
      await worker.stop();
      return {
        avgBytes: rows[0]!.avg,
        perClaim:
          (await metricValue(worker.metrics, 'skiplock_claim_batch_size_sum')) /
          (await metricValue(worker.metrics, 'skiplock_claim_batch_size_count')),
      };
    };
    const unbounded = await perClaim('bytes-default', {});
    expect(unbounded.avgBytes).toBeGreaterThan(1_500);
    // 8 MiB by default: thousands of these payloads, so the job count bound (1,000) applies.
    expect(unbounded.perClaim).toBeGreaterThan(50);
    const bounded = await perClaim('bytes-bounded', {
      maxPrefetchBytes: Math.round(10 * unbounded.avgBytes),
    });
    // Each claim takes the 2 free slots plus at most about 10 payloads' worth of buffer.
    expect(bounded.perClaim).toBeLessThanOrEqual(2 + 11);
    expect(bounded.perClaim).toBeGreaterThan(2);
  });
});
