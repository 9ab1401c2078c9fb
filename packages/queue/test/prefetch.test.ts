import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createAdmitter, createClient, defineJob } from '../src/index.js';
import { NOTIFY_CHANNEL } from '../src/listener.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { countByStatus, jobRow, quiet, testWorker } from './fixtures.js';
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
    const worker = testWorker(db.pool, [mixed], {
      concurrency: 2,
      pollIntervalMs: 20,
      // Buffered until stop() here, however slow the machine: not handed back for waiting.
      maxPrefetchWaitMs: 600_000,
    });
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

  it('gives back the slot of a buffered job stopped before it started, as stop() hands the buffer back', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const warm = defineJob({
      type: 'warm',
      queue: 'stopped-buffered',
      payload: z.object({ slow: z.boolean() }),
      handler: async ({ slow }) => {
        if (slow) await gate;
      },
    });
    let keyedRuns = 0;
    const keyed = defineJob({
      type: 'keyed',
      queue: 'stopped-buffered',
      payload: z.object({ n: z.number() }),
      concurrencyKey: () => 'stopped-buffered',
      concurrencyLimit: 1,
      handler: async () => void (keyedRuns += 1),
    });
    const worker = testWorker(db.pool, [warm, keyed], {
      concurrency: 1,
      pollIntervalMs: 20,
      maxPrefetchWaitMs: 600_000,
    });
    const claimed = new Set<string>();
    worker.on('job:claimed', (e) => claimed.add(e.jobId));
    const admitter = createAdmitter({ pool: db.pool, logger: quiet });
    const row = async (id: string) =>
      (
        await db.pool.query<{ status: string; lease_expires_at: Date | null }>(
          'SELECT status::text, lease_expires_at FROM skiplock.jobs WHERE id = $1',
          [id],
        )
      ).rows[0]!;
    try {
      // Teach the worker its handlers are quick, so that it claims ahead; then hold its only slot.
      await client.enqueueMany(
        warm,
        Array.from({ length: 20 }, () => ({ payload: { slow: false } })),
      );
      await worker.start();
      await waitFor(
        async () => (await countByStatus(db.pool, 'stopped-buffered')).completed === 20,
      );
      const slow = await client.enqueue(warm, { slow: true });
      await waitFor(() => claimed.has(slow.id));
      const [first, second] = await client.enqueueMany(keyed, [
        { payload: { n: 1 } },
        { payload: { n: 2 } },
      ]);
      await admitter.runOnce();
      await waitFor(() => claimed.has(first!.id), { what: 'the first keyed job claimed ahead' });
      // Stopped while it waits in the buffer: cancelled, its lease (and the key's one slot) kept.
      expect(await client.cancelJob(first!.id, { running: true })).toBe(true);
      expect((await row(first!.id)).lease_expires_at).not.toBeNull();
      const stopping = worker.stop({ timeoutMs: 5_000 });
      release();
      await stopping;
      // Before: the hand-back skipped it (no longer processing), and its lease held the key's
      // slot for a handler that never started until the lease ran out.
      expect(await row(first!.id)).toEqual({ status: 'cancelled', lease_expires_at: null });
      await admitter.runOnce();
      expect((await row(second!.id)).status).toBe('pending');
      expect(keyedRuns).toBe(0);
    } finally {
      release();
      await worker.stop();
    }
  });

  it('never starts a buffered job stopped before its turn on a listening worker, and gives its lease back', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const ran: number[] = [];
    const job = defineJob({
      type: 'stop-in-buffer',
      queue: 'stopped-in-buffer',
      payload: z.object({ n: z.number(), slow: z.boolean() }),
      // A 30 s lease: the worker's own renewal comes 10 s after its claim.
      handler: async ({ n, slow }) => {
        ran.push(n);
        if (slow) await gate;
      },
    });
    const logs = captureLogs();
    const worker = testWorker(db.pool, [job], {
      concurrency: 1,
      pollIntervalMs: 20,
      maxPrefetchWaitMs: 600_000,
      listen: true,
      logger: logs.logger,
    });
    const claimed = new Set<string>();
    worker.on('job:claimed', (e) => claimed.add(e.jobId));
    try {
      // Teach the worker its handlers are quick, so that it claims ahead; then hold its only slot.
      await client.enqueueMany(
        job,
        Array.from({ length: 20 }, () => ({ payload: { n: 0, slow: false } })),
      );
      await worker.start();
      await waitFor(
        async () => (await countByStatus(db.pool, 'stopped-in-buffer')).completed === 20,
      );
      const slow = await client.enqueue(job, { n: 1, slow: true });
      await waitFor(() => ran.includes(1), { what: 'the slow job to hold the slot' });
      const buffered = await client.enqueue(job, { n: 2, slow: false });
      await waitFor(() => claimed.has(buffered.id), { what: 'the job claimed into the buffer' });
      expect(await client.cancelJob(buffered.id, { running: true })).toBe(true);
      // Found stopped by the renewal the stop's notification set off, while it still waits (its
      // `job:lock_lost` event comes when its turn does).
      await waitFor(
        () => logs.lines.some((l) => l.reason === 'lock_lost' && l.jobId === buffered.id),
        {
          timeoutMs: 4_000,
          what: 'the buffered job found stopped',
        },
      );
      release();
      // Its handler never started, so its worker clears the stopped run's lease at once.
      await waitFor(
        async () =>
          (
            await db.pool.query<{ lease_expires_at: Date | null }>(
              'SELECT lease_expires_at FROM skiplock.jobs WHERE id = $1',
              [buffered.id],
            )
          ).rows[0]!.lease_expires_at === null,
        { what: "the stopped job's lease cleared" },
      );
      await waitFor(async () => (await jobRow(db.pool, slow.id)).status === 'completed');
      // Before: the job started once the slot came free, the stop seen only at the next renewal.
      expect(ran.filter((n) => n === 2)).toEqual([]);
      expect(await jobRow(db.pool, buffered.id)).toMatchObject({ status: 'cancelled' });
    } finally {
      release();
      await worker.stop();
    }
  });

  it('hands the buffer back for other workers once its jobs waited maxPrefetchWaitMs for a slot', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const ranOn: string[] = [];
    const mixed = defineJob({
      type: 'mixed-wait',
      queue: 'buffer-wait',
      payload: z.object({ slow: z.boolean() }),
      handler: async ({ slow }, ctx) => {
        if (slow) await gate;
        else ranOn.push(ctx.job.id);
      },
    });
    const logs = captureLogs();
    const a = testWorker(db.pool, [mixed], {
      concurrency: 1,
      pollIntervalMs: 20,
      maxPrefetchWaitMs: 200,
      logger: logs.logger,
    });
    const b = testWorker(db.pool, [mixed], { concurrency: 5 });
    const claimedByA = new Set<string>();
    a.on('job:claimed', (e) => claimedByA.add(e.jobId));
    try {
      // Teach worker A its handlers are quick, so that it claims ahead.
      await client.enqueueMany(
        mixed,
        Array.from({ length: 20 }, () => ({ payload: { slow: false } })),
      );
      await a.start();
      await waitFor(async () => (await countByStatus(db.pool, 'buffer-wait')).completed === 20);
      // One slow job and five quick ones behind it, committed together: A's next claim takes all
      // six, runs the slow one in its only slot and buffers the rest.
      const tx = await db.pool.connect();
      let jobs: { id: string }[];
      try {
        await tx.query('BEGIN');
        jobs = await client.enqueueMany(
          mixed,
          [true, false, false, false, false, false].map((slow) => ({ payload: { slow } })),
          { tx },
        );
        await tx.query('COMMIT');
      } finally {
        tx.release();
      }
      const quickIds = jobs.slice(1).map((j) => j.id);
      // Counted as A claims them, not read from the rows: they read `processing` only until A's
      // hand-back, 200 ms later, which a loaded machine's poll can miss.
      await waitFor(() => jobs.every((j) => claimedByA.has(j.id)), {
        what: 'worker A claiming all six',
      });
      // Before: they stayed leased in A's buffer behind the slow job, and B found nothing.
      await waitFor(
        async () => {
          await b.runOnce();
          return quickIds.every((id) => ranOn.includes(id));
        },
        { what: 'worker B running the jobs A handed back' },
      );
      const { rows } = await db.pool.query<{ id: string; status: string; attempts: number }>(
        `SELECT id::text, status::text, attempts FROM skiplock.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
        [jobs.map((j) => j.id)],
      );
      // Handed back without spending an attempt, while the slow job still holds A's slot.
      expect(rows.filter((r) => quickIds.includes(r.id))).toEqual(
        quickIds.map((id) => ({ id, status: 'completed', attempts: 1 })),
      );
      expect(rows.find((r) => r.id === jobs[0]!.id)).toMatchObject({ status: 'processing' });
      expect(logs.lines.find((l) => l.reason === 'prefetch_released')).toMatchObject({
        jobs: 5,
        running: 1,
      });
      expect(
        await metricValue(a.metrics, 'skiplock_job_outcomes_total', {
          job_type: 'mixed-wait',
          outcome: 'released',
          reason: 'buffer_wait',
        }),
      ).toBe(5);
    } finally {
      release();
      await a.stop();
      await b.stop();
    }
  });

  it('keeps the buffer when its hand-back fails, and runs the jobs once a slot frees', async () => {
    /** A pool whose first release of waiting buffered jobs fails, as a dropped connection would. */
    class FailingRelease extends pg.Pool {
      failed = 0;
      override query(...args: unknown[]): never {
        const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string })?.text;
        if (this.failed === 0 && text?.includes('WITH released AS')) {
          this.failed += 1;
          return Promise.reject(new Error('connection lost')) as never;
        }
        return (super.query as (...a: unknown[]) => never)(...args);
      }
    }
    const pool = new FailingRelease({ connectionString: db.url, max: 4 });
    pool.on('error', () => {});
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const mixed = defineJob({
      type: 'mixed-fail',
      queue: 'buffer-fail',
      payload: z.object({ slow: z.boolean() }),
      maxAttempts: 1,
      handler: async ({ slow }) => {
        if (slow) await gate;
      },
    });
    const logs = captureLogs();
    const worker = testWorker(pool, [mixed], {
      concurrency: 1,
      pollIntervalMs: 20,
      maxPrefetchWaitMs: 100,
      logger: logs.logger,
    });
    try {
      await client.enqueueMany(
        mixed,
        Array.from({ length: 20 }, () => ({ payload: { slow: false } })),
      );
      await worker.start();
      await waitFor(async () => (await countByStatus(db.pool, 'buffer-fail')).completed === 20);
      await client.enqueueMany(
        mixed,
        [true, false, false, false].map((slow) => ({ payload: { slow } })),
      );
      await waitFor(() => pool.failed === 1, { what: 'the failed hand-back' });
      // Before: dropped, left to wait out their leases and die with an attempt never run.
      expect(await worker.heartbeat()).toMatchObject({ lost: 0 });
      release();
      await waitFor(async () => (await countByStatus(db.pool, 'buffer-fail')).completed === 24, {
        what: 'every job completed',
      });
      expect(logs.reasons()).toContain('db_error');
      expect(logs.reasons()).not.toContain('lock_lost');
    } finally {
      release();
      await worker.stop();
      await pool.end();
    }
  });

  it('does not start a buffered job whose failed hand-back committed all the same', async () => {
    /** A pool whose first release of waiting buffered jobs commits, then loses its answer. */
    class LostAnswer extends pg.Pool {
      lost = 0;
      /** Counted when the hand-back's answer arrives (it has committed), not when it is sent. */
      committed = 0;
      override query(...args: unknown[]): never {
        const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string })?.text;
        const sent = (super.query as (...a: unknown[]) => Promise<unknown>)(...args);
        if (this.lost === 0 && text?.includes('WITH released AS')) {
          this.lost += 1;
          return sent.then(() => {
            this.committed += 1;
            throw new Error('connection lost after COMMIT');
          }) as never;
        }
        return sent as never;
      }
    }
    const pool = new LostAnswer({ connectionString: db.url, max: 4 });
    pool.on('error', () => {});
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const runs = new Map<number, string[]>();
    const payload = z.object({ n: z.number(), slow: z.boolean() });
    const ran = (n: number, by: string) => runs.set(n, [...(runs.get(n) ?? []), by]);
    const onFirst = defineJob({
      type: 'lost-hand-back',
      queue: 'lost-hand-back',
      payload,
      handler: async ({ n, slow }) => {
        if (slow) await gate;
        ran(n, 'first');
      },
    });
    const onSecond = defineJob({
      type: 'lost-hand-back',
      queue: 'lost-hand-back',
      payload,
      handler: ({ n }) => ran(n, 'second'),
    });
    const logs = captureLogs();
    const first = testWorker(pool, [onFirst], {
      workerId: 'first',
      concurrency: 1,
      pollIntervalMs: 20,
      maxPrefetchWaitMs: 100,
      logger: logs.logger,
    });
    const second = testWorker(db.pool, [onSecond], { workerId: 'second' });
    try {
      // Quick jobs first, so the worker has a handler speed to size its buffer by.
      await client.enqueueMany(
        onFirst,
        Array.from({ length: 20 }, (_, n) => ({ payload: { n: 100 + n, slow: false } })),
      );
      await first.start();
      await waitFor(async () => (await countByStatus(db.pool, 'lost-hand-back')).completed === 20);
      await client.enqueueMany(
        onFirst,
        [true, false, false, false].map((slow, n) => ({ payload: { n, slow } })),
      );
      await waitFor(() => pool.committed === 1, { what: 'the hand-back whose answer is lost' });
      // Back in the database, so another worker claims and runs them; the first one still has
      // them buffered.
      expect(await second.runOnce()).toBe(3);
      release();
      await waitFor(async () => (await countByStatus(db.pool, 'lost-hand-back')).completed === 24, {
        what: 'every job completed',
      });
      await first.stop();
      // Before: the first worker started them as its slot freed, and each ran twice.
      expect(Object.fromEntries([...runs].filter(([n]) => n < 100))).toEqual({
        0: ['first'],
        1: ['second'],
        2: ['second'],
        3: ['second'],
      });
      expect(logs.reasons()).toContain('db_error');
    } finally {
      release();
      await first.stop();
      await pool.end();
    }
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
