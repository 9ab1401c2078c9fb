import { createDatabase, dropDatabase } from '@skiplock/devdb';
import type { SQL } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob, migrate } from '../src/index.js';
import { runSql } from '../src/db.js';
import { claimJobs } from '../src/sql/claim.js';
import { extendLeases } from '../src/sql/heartbeat.js';
import { completeBatch, completeJobs, releaseJobs } from '../src/sql/settle.js';
import { failExpiredJobs, selectExpiredLeases } from '../src/sql/sweep.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { countByStatus, quiet, testWorker } from './fixtures.js';
import { metricValue } from '../../../test/support/metrics.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

describe('claiming', () => {
  it('1,000 jobs, 8 concurrent workers on their own connections, batched claims: each job runs exactly once', async () => {
    const executions = new Map<string, string[]>();
    const work = defineJob({
      type: 'count-me',
      queue: 'overlap',
      payload: z.object({ n: z.number() }),
      handler: async (_p, ctx) => {
        const seen = executions.get(ctx.job.id) ?? [];
        seen.push(workerIdOf(ctx.logger));
        executions.set(ctx.job.id, seen);
        // Yield so that claims interleave with running handlers.
        await new Promise((r) => setImmediate(r));
      },
    });
    const workerIdOf = (logger: { bindings(): Record<string, unknown> }) =>
      String(logger.bindings().worker);
    await client.enqueueMany(
      work,
      Array.from({ length: 1_000 }, (_, n) => ({ payload: { n } })),
    );
    // No hand-back of a buffer that waited (maxPrefetchWaitMs): on a loaded machine a buffered
    // job could wait past the default second and be claimed again, legitimately (seen in CI).
    // What this test counts is claims that overlap.
    const workers = Array.from({ length: 8 }, () =>
      testWorker(db.newPool(3), [work], {
        concurrency: 8,
        pollIntervalMs: 20,
        maxPrefetchWaitMs: 600_000,
      }),
    );
    const claimCounts = new Map<string, number>();
    for (const w of workers) {
      w.on('job:claimed', (e) => claimCounts.set(e.jobId, (claimCounts.get(e.jobId) ?? 0) + 1));
    }
    await Promise.all(workers.map((w) => w.start()));
    await waitFor(async () => (await countByStatus(db.pool)).completed === 1_000, {
      timeoutMs: 60_000,
      what: '1,000 completed jobs',
    });
    await Promise.all(workers.map((w) => w.stop()));
    const jobsPerClaim = await Promise.all(
      workers.map(
        async (w) =>
          (await metricValue(w.metrics, 'skiplock_claim_batch_size_sum')) /
          Math.max(1, await metricValue(w.metrics, 'skiplock_claim_batch_size_count')),
      ),
    );

    expect(executions.size).toBe(1_000);
    expect([...executions.values()].every((runs) => runs.length === 1)).toBe(true);
    expect(claimCounts.size).toBe(1_000);
    expect([...claimCounts.values()].every((n) => n === 1)).toBe(true);
    const perWorker = await Promise.all(
      workers.map((w) =>
        metricValue(w.metrics, 'skiplock_job_outcomes_total', { outcome: 'completed' }),
      ),
    );
    expect(perWorker.reduce((a, b) => a + b, 0)).toBe(1_000);
    // More than one worker took part, and claims carried more than one job at a time.
    expect(perWorker.filter((n) => n > 0).length).toBeGreaterThan(1);
    expect(Math.max(...jobsPerClaim)).toBeGreaterThan(1);
  });

  it('concurrent raw claims on separate connections never return the same job', async () => {
    const queue = 'raw-overlap';
    await db.pool.query(
      `INSERT INTO skiplock.jobs (queue, job_type) SELECT $1, 'raw' FROM generate_series(1, 600)`,
      [queue],
    );
    const pools = Array.from({ length: 6 }, () => db.newPool(1));
    const claimed: string[] = [];
    await Promise.all(
      pools.map(async (pool, i) => {
        for (;;) {
          const { rows } = await runSql<{ id: string }>(
            pool,
            claimJobs({
              queues: [queue],
              limit: 25,
              workerId: `raw-${i}`,
              agingMs: null,
              asyncCommit: true,
            }),
          );
          if (rows.length === 0) return;
          claimed.push(...rows.map((r) => r.id));
        }
      }),
    );
    expect(claimed).toHaveLength(600);
    expect(new Set(claimed).size).toBe(600);
  });

  it('claims, settles and sweeps through their own indexes on a big table never analyzed', async () => {
    // Its own database: the planner must see a table that no ANALYZE (manual or autovacuum) has
    // touched, as right after a first bulk load. There the aging index once won on cost and the
    // claim sorted every runnable row (88 ms per claim at 40,000 pending jobs), and the batched
    // completion read every processing entry of the sweep index (7 ms per 100 jobs, growing).
    const adminUrl = inject('adminUrl');
    const name = `${inject('runPrefix')}plan_${randomBytes(4).toString('hex')}`;
    const url = await createDatabase(adminUrl, name);
    const conn = new pg.Client({ connectionString: url });
    const lines = (rows: { 'QUERY PLAN': string }[]) => rows.map((r) => r['QUERY PLAN']).join('\n');
    // The worker sends its claim and completion as named prepared statements, which PostgreSQL
    // plans with generic parameters after five runs: each plan is checked both ways.
    const literal = (v: unknown) =>
      conn.escapeLiteral(
        Array.isArray(v) ? `{${v.map((x) => `"${String(x)}"`).join(',')}}` : String(v),
      );
    const explain = async (query: SQL): Promise<string[]> => {
      const q = new PgDialect().sqlToQuery(query);
      const custom = await conn.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${q.sql}`, q.params);
      await conn.query(`PREPARE generic_plan AS ${q.sql}`);
      try {
        await conn.query('SET plan_cache_mode = force_generic_plan');
        const generic = await conn.query<{ 'QUERY PLAN': string }>(
          `EXPLAIN EXECUTE generic_plan(${q.params.map(literal).join(', ')})`,
        );
        return [lines(custom.rows), lines(generic.rows)];
      } finally {
        await conn.query('RESET plan_cache_mode; DEALLOCATE generic_plan');
      }
    };
    try {
      await migrate({ connectionString: url, logger: quiet });
      await conn.connect();
      await conn.query(
        `INSERT INTO skiplock.jobs (job_type, payload)
         SELECT 'plan-me', jsonb_build_object('n', n) FROM generate_series(1, 40000) n`,
      );
      await conn.query(
        `UPDATE skiplock.jobs SET status = 'processing', attempts = 1, locked_by = 'w',
                lease_expires_at = now() + interval '30 seconds' WHERE id <= 20000`,
      );
      const { rows: stats } = await conn.query<{ reltuples: number }>(
        `SELECT reltuples FROM pg_class WHERE oid = 'skiplock.jobs'::regclass`,
      );
      expect(stats[0]!.reltuples).toBe(-1);
      for (const agingMs of [300_000, null]) {
        const plans = await explain(
          claimJobs({
            queues: ['default'],
            limit: 100,
            workerId: 'explain',
            agingMs,
            asyncCommit: true,
          }),
        );
        for (const plan of plans) {
          expect(plan).toContain('jobs_claim_idx');
          // Sorting the claimed batch (at most `limit` rows) is fine; sorting the table is not.
          expect(plan).not.toMatch(/Sort Key: j/);
        }
      }
      // With statistics of a table full of pending jobs, the claim must still find its rows by key.
      await conn.query('ANALYZE skiplock.jobs');
      for (const agingMs of [300_000, null]) {
        const plans = await explain(
          claimJobs({
            queues: ['default', 'other'],
            limit: 210,
            workerId: 'explain',
            agingMs,
            asyncCommit: true,
          }),
        );
        for (const plan of plans) expect(plan).not.toMatch(/Seq Scan|Hash Join/);
        const singles = await explain(
          // With asyncCommit off the statement keeps its shape, and its plan.
          claimJobs({
            queues: ['default'],
            limit: 210,
            workerId: 'explain',
            agingMs,
            asyncCommit: false,
          }),
        );
        for (const single of singles) {
          expect(single).not.toMatch(/Seq Scan|Hash Join/);
          expect(single).toContain('jobs_pkey');
        }
      }
      const tokens = Array.from({ length: 100 }, (_, i) => ({
        id: String(10_001 + i),
        attempt: 1,
      }));
      for (const settle of [
        completeJobs('w', tokens, { durable: false }),
        completeJobs('w', tokens, { durable: true }),
        completeBatch('w', tokens, false),
        completeBatch('w', tokens, true),
        releaseJobs('w', tokens, true),
        releaseJobs('w', tokens, false),
        extendLeases('w', tokens, true),
        extendLeases('w', tokens, false),
      ]) {
        for (const plan of await explain(settle)) {
          expect(plan).toContain('jobs_pkey');
          expect(plan).not.toContain('jobs_sweep_idx');
          expect(plan).not.toMatch(/Function Scan|Seq Scan/);
        }
      }
      for (const plan of await explain(selectExpiredLeases(500, ['7']))) {
        expect(plan).toContain('jobs_sweep_idx');
      }
      // The sweep's settle walks its failures and finds each job by primary key.
      const swept = await explain(
        failExpiredJobs(
          tokens.map((t) => ({ id: t.id, status: 'retryable', delayMs: 1_000, message: 'gone' })),
        ),
      );
      for (const plan of swept) {
        expect(plan).toContain('jobs_pkey');
        expect(plan).not.toMatch(/Seq Scan|jobs_sweep_idx/);
      }
    } finally {
      await conn.end();
      await dropDatabase(adminUrl, name);
    }
  });

  it('claims by priority desc, then run_at, then id', async () => {
    const order: string[] = [];
    const ranked = defineJob({
      type: 'ranked',
      queue: 'ranked',
      payload: z.object({ name: z.string() }),
      handler: async ({ name }) => void order.push(name),
    });
    await client.enqueue(ranked, { name: 'low-old' }, { priority: 0, delayMs: 0 });
    await db.pool.query(
      `UPDATE skiplock.jobs SET run_at = now() - interval '10 seconds' WHERE payload->>'name' = 'low-old'`,
    );
    await client.enqueue(ranked, { name: 'high-1' }, { priority: 10 });
    await client.enqueue(ranked, { name: 'high-2' }, { priority: 10 });
    await client.enqueue(ranked, { name: 'mid' }, { priority: 5 });
    const worker = testWorker(db.pool, [ranked], { concurrency: 1, agingMs: null });
    while ((await worker.runOnce()) > 0);
    expect(order).toEqual(['high-1', 'high-2', 'mid', 'low-old']);
  });

  it('keeps that order inside one claimed batch, aged jobs first', async () => {
    for (const agingMs of [null, 5_000]) {
      const queue = `batch-order-${agingMs ?? 'off'}`;
      const order: string[] = [];
      const ranked = defineJob({
        type: queue,
        queue,
        payload: z.object({ name: z.string() }),
        handler: ({ name }) => void order.push(name),
      });
      // Ids rise in this order, which is not the claim order, so id order (how the rows come
      // back from the update) is wrong at every level: priority, then run_at, then id.
      for (const [name, priority] of [
        ['low-old', 0],
        ['mid', 5],
        ['high', 10],
        ['mid-earlier', 5],
        ['mid-twin', 5],
        ['low-older', 0],
      ] as const) {
        await client.enqueue(ranked, { name }, { priority });
      }
      const setRunAt = (name: string, runAt: string) =>
        db.pool.query(
          `UPDATE skiplock.jobs SET run_at = ${runAt} WHERE queue = $1 AND payload->>'name' = $2`,
          [queue, name],
        );
      await setRunAt('low-old', `now() - interval '10 seconds'`);
      await setRunAt('low-older', `now() - interval '20 seconds'`);
      await setRunAt('mid-earlier', `now() - interval '2 seconds'`);
      // The same run_at as mid: id breaks the tie.
      await setRunAt(
        'mid-twin',
        `(SELECT run_at FROM skiplock.jobs WHERE queue = $1 AND payload->>'name' = 'mid')`,
      );
      const worker = testWorker(db.pool, [ranked], { concurrency: 6, agingMs });
      expect(await worker.runOnce()).toBe(6);
      const ranks = ['high', 'mid-earlier', 'mid', 'mid-twin'];
      expect(order).toEqual(
        agingMs === null ? [...ranks, 'low-older', 'low-old'] : ['low-older', 'low-old', ...ranks],
      );
    }
  });

  it('ages: a low-priority job that waited past agingMs goes before fresh high-priority work', async () => {
    const order: string[] = [];
    const aged = defineJob({
      type: 'aged',
      queue: 'aging',
      payload: z.object({ name: z.string() }),
      handler: async ({ name }) => void order.push(name),
    });
    await client.enqueueMany(aged, [
      { payload: { name: 'starved' }, priority: -5 },
      ...Array.from({ length: 5 }, (_, i) => ({ payload: { name: `urgent-${i}` }, priority: 100 })),
    ]);
    // The low-priority job has been runnable for a minute; the urgent stream just arrived.
    await db.pool.query(
      `UPDATE skiplock.jobs SET run_at = now() - interval '1 minute' WHERE payload->>'name' = 'starved'`,
    );
    const worker = testWorker(db.pool, [aged], { concurrency: 1, agingMs: 30_000 });
    await worker.runOnce();
    expect(order).toEqual(['starved']);
    // Without aging, the same situation starves it behind every urgent job.
    order.length = 0;
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'pending', completed_at = NULL, run_at = now() - interval '1 minute' WHERE payload->>'name' = 'starved'`,
    );
    const unaged = testWorker(db.pool, [aged], { concurrency: 1, agingMs: null });
    while ((await unaged.runOnce()) > 0);
    expect(order.at(-1)).toBe('starved');
    expect(order.slice(0, 5).every((n) => n.startsWith('urgent'))).toBe(true);
  });

  it('does not claim a job before its run_at, and claims it once due', async () => {
    let ran = 0;
    const later = defineJob({
      type: 'later',
      queue: 'later',
      payload: z.object({}),
      handler: async () => void (ran += 1),
    });
    const { id } = await client.enqueue(later, {}, { delayMs: 3_600_000 });
    const worker = testWorker(db.pool, [later]);
    expect(await worker.runOnce()).toBe(0);
    expect(ran).toBe(0);
    await db.pool.query(`UPDATE skiplock.jobs SET run_at = now() - interval '1 ms' WHERE id = $1`, [
      id,
    ]);
    expect(await worker.runOnce()).toBe(1);
    expect(ran).toBe(1);
  });

  it('only claims from its own queues', async () => {
    const typed = defineJob({
      type: 'q-only',
      queue: 'mine',
      payload: z.object({}),
      handler: async () => {},
    });
    await client.enqueue(typed, {}, { queue: 'theirs' });
    expect(await testWorker(db.pool, [typed]).runOnce()).toBe(0);
    expect(await testWorker(db.pool, [typed], { queues: ['theirs'] }).runOnce()).toBe(1);
  });
});
