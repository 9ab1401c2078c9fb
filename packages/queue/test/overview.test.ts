import type { SQL } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  browseJobs,
  discardDeadJobs,
  findJobsByKey,
  readQueueOverview,
  readRecentWorkers,
  readThroughput,
  retryDeadJobs,
} from '../src/engine.js';
import {
  selectBrowseIds,
  selectBrowseReach,
  selectDeadByQueue,
  selectJobIdsByKey,
  selectJobSummaries,
  selectProcessingByQueue,
  selectRecentWorkers,
  selectRunnableByQueue,
  selectThroughput,
  selectWaitingByQueue,
} from '../src/sql/overview.js';
import { SkiplockError } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';

const db = await useTestDatabase();

// A table shaped like a busy production one: most rows are finished history (here 200,000
// completed over two hours), a small live set in each state, analyzed. Every overview read must
// reach its rows through an index and stop at its cap, so its cost does not grow with the history.
const COMPLETED = 200_000;

beforeAll(async () => {
  await db.pool.query(`
    INSERT INTO skiplock.jobs (queue, job_type, status, attempts, completed_at, updated_at, locked_by)
    SELECT 'mail', 'send', 'completed', 1, now() - (g % 7200) * interval '1 second',
           now() - (g % 7200) * interval '1 second', 'w-' || (g % 3)
    FROM generate_series(1, ${COMPLETED}) g;
    INSERT INTO skiplock.jobs (queue, job_type, status, run_at)
    SELECT 'q' || (g % 3), 'work', CASE WHEN g % 4 = 0 THEN 'retryable' ELSE 'pending' END::skiplock.job_status,
           now() - interval '90 seconds' + (g % 2) * interval '1 hour'
    FROM generate_series(1, 3000) g;
    INSERT INTO skiplock.jobs (queue, job_type, status, attempts, locked_by, locked_at, lease_expires_at)
    SELECT 'q' || (g % 2), 'work', 'processing', 1, 'w-' || (g % 4), now(),
           now() + CASE WHEN g <= 40 THEN interval '-5 seconds' ELSE interval '25 seconds' END
    FROM generate_series(1, 400) g;
    INSERT INTO skiplock.jobs (queue, job_type, status, updated_at, last_error)
    SELECT 'billing', 'charge', 'dead', now() - (g % 2) * interval '2 hours', 'declined'
    FROM generate_series(1, 300) g;
    INSERT INTO skiplock.jobs (queue, job_type, status, concurrency_key, concurrency_limit)
    SELECT 'tenants', 'sync', 'waiting', 'tenant:' || (g % 10), 1 FROM generate_series(1, 250) g;
    INSERT INTO skiplock.jobs (queue, job_type, status, idempotency_key, completed_at)
    SELECT 'q' || (g % 3), 'keyed', 'completed', 'key-' || g, now() FROM generate_series(1, 3000) g;
    ANALYZE skiplock.jobs`);
});

async function explain(query: SQL): Promise<string> {
  const q = new PgDialect().sqlToQuery(query);
  const { rows } = await db.pool.query<{ 'QUERY PLAN': string }>(
    `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) ${q.sql}`,
    q.params,
  );
  return rows.map((r) => r['QUERY PLAN']).join('\n');
}

/** Rows the plan read from the jobs table: the most any node passed on. */
function rowsRead(plan: string): number {
  return Math.max(...[...plan.matchAll(/actual rows=(\d+)/g)].map((m) => Number(m[1])));
}

describe('overview reads on a table of 200,000 finished jobs', () => {
  it('each walks its own index, never the table, and stops at its cap', async () => {
    const cap = 100;
    const plans: [string, SQL, RegExp][] = [
      ['runnable', selectRunnableByQueue(cap, 200), /jobs_aging_idx/],
      ['processing', selectProcessingByQueue(cap), /jobs_sweep_idx/],
      ['waiting', selectWaitingByQueue(cap), /jobs_waiting_idx/],
      ['dead', selectDeadByQueue(cap), /jobs_retention_idx/],
      ['throughput', selectThroughput(cap), /jobs_retention_idx/],
      ['workers', selectRecentWorkers(cap, 300_000), /jobs_sweep_idx[\s\S]*jobs_retention_idx/],
      ['by key', selectJobIdsByKey('key-7', 100), /jobs_queue_idempotency_key_unique/],
      [
        'browse',
        selectBrowseIds({ statuses: ['dead'], queue: 'billing', limit: 50, scanLimit: 1_000 }),
        /Index Scan Backward using jobs_pkey/,
      ],
      ['browse reach', selectBrowseReach({ limit: 50, scanLimit: 1_000 }), /jobs_pkey/],
      ['summaries', selectJobSummaries(['1', '2', '3']), /jobs_pkey/],
    ];
    for (const [name, query, index] of plans) {
      const plan = await explain(query);
      if (process.env.SKIPLOCK_SHOW_PLANS) console.log(`${name}:\n${plan}`);
      expect(plan, name).toMatch(index);
      expect(plan, name).not.toMatch(/Seq Scan/);
      // Bounded work: no node handles more rows than a few caps (or the scan window), whatever
      // the 200,000 completed rows and the 3,000 runnable ones.
      expect(rowsRead(plan), name).toBeLessThanOrEqual(1_000);
    }
  });

  it('counts per queue and status, says which counts hit the cap, and the oldest runnable age', async () => {
    const exact = await readQueueOverview(db.pool);
    const q0 = exact.queues.find((q) => q.queue === 'q0')!;
    expect(q0.pending + q0.retryable).toBe(1_000);
    expect(q0.retryable).toBe(250);
    expect(q0.atLeast).toEqual([]);
    // Half of each queue's runnable jobs are due since 90 s, half in an hour.
    expect(q0.oldestRunnableAgeMs).toBeGreaterThanOrEqual(89_000);
    expect(exact.queues.find((q) => q.queue === 'billing')).toMatchObject({
      dead: 300,
      deadLastHour: 150,
    });
    expect(exact.queues.find((q) => q.queue === 'tenants')?.waiting).toBe(250);
    const processing = exact.queues.filter((q) => q.processing > 0);
    expect(processing.reduce((n, q) => n + q.processing, 0)).toBe(400);
    expect(processing.reduce((n, q) => n + q.expiredLeases, 0)).toBe(40);
    expect(exact.queues.some((q) => q.queue === 'mail')).toBe(false);
    expect(exact.estimatedJobs).toBeGreaterThan(150_000);

    const capped = await readQueueOverview(db.pool, { cap: 50 });
    const c0 = capped.queues.find((q) => q.queue === 'q0')!;
    expect(c0.pending + c0.retryable).toBeGreaterThanOrEqual(50);
    expect(c0.atLeast).toEqual(expect.arrayContaining(['pending', 'retryable', 'processing']));
    // A capped count reads as the cap ("10,000+" on the dashboard), never cap + 1 it saw.
    expect(Math.max(c0.pending, c0.retryable, c0.processing)).toBeLessThanOrEqual(50);
    const billing = capped.queues.find((q) => q.queue === 'billing')!;
    expect(billing.atLeast).toContain('dead');
    expect(billing.dead).toBe(50);
    // So do the counts read with them: none reads more than its cap, nor more than its whole.
    for (const q of capped.queues) {
      expect(q.deadLastHour).toBeLessThanOrEqual(Math.min(q.dead, 50));
      expect(q.expiredLeases).toBeLessThanOrEqual(Math.min(q.processing, 50));
    }
    const tenants = capped.queues.find((q) => q.queue === 'tenants')!;
    expect(tenants).toMatchObject({ waiting: 50, atLeast: ['waiting'] });
  });

  it('reads the last hour per minute, and the workers seen lately', async () => {
    // The default cap (20,000 per series, kept small because open overview pages poll it) stops
    // this busy table's count and says so.
    const polled = await readThroughput(db.pool);
    expect(polled.capped).toBe(true);
    expect(polled.completed.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(20_000);
    const t = await readThroughput(db.pool, { cap: 200_000 });
    // 200,000 rows over 7,200 s: half of them fall in the last hour.
    const completed = t.completed.reduce((a, b) => a + b, 0);
    expect(completed).toBeGreaterThan(95_000);
    expect(completed).toBeLessThan(105_000);
    expect(t.dead.reduce((a, b) => a + b, 0)).toBe(150);
    expect(t.capped).toBe(false);
    const workers = await readRecentWorkers(db.pool);
    expect(workers.map((w) => w.workerId).sort()).toEqual(['w-0', 'w-1', 'w-2', 'w-3']);
    expect(workers.find((w) => w.workerId === 'w-3')?.running).toBe(90);
  });

  it('browses newest first a page at a time, and a rare filter stops at the scan window', async () => {
    const first = await browseJobs(db.pool, { statuses: ['dead'], limit: 200 });
    expect(first.jobs).toHaveLength(200);
    expect(first.complete).toBe(true);
    const ids = first.jobs.map((j) => BigInt(j.id));
    expect(ids).toEqual([...ids].sort((a, b) => (a > b ? -1 : 1)));
    const second = await browseJobs(db.pool, {
      statuses: ['dead'],
      limit: 200,
      beforeId: first.nextBeforeId!,
    });
    expect(second.jobs).toHaveLength(100);
    // The dead jobs were inserted before the waiting and keyed ones: a small window misses them.
    const narrow = await browseJobs(db.pool, { statuses: ['dead'], limit: 10, scanLimit: 100 });
    expect(narrow.jobs).toHaveLength(0);
    expect(narrow.complete).toBe(false);
    expect(narrow.nextBeforeId).not.toBeNull();
    expect(await findJobsByKey(db.pool, 'key-7')).toHaveLength(1);
    expect(await findJobsByKey(db.pool, 'no-such-key')).toEqual([]);
  });

  it('a full page of ids goes on to older jobs even when one of them is gone before it is read', async () => {
    // Retention (or an operator) deletes a job between the page's two reads, its ids and its rows:
    // in a transaction rolled back after, so the table stays as the other tests expect it.
    const tx = await db.pool.connect();
    try {
      await tx.query('BEGIN');
      let idsRead = false;
      const deleting = {
        query: async (...args: Parameters<typeof tx.query>) => {
          const result = await (tx.query as (...a: unknown[]) => Promise<unknown>)(...args);
          if (!idsRead) {
            idsRead = true;
            const ids = (result as { rows: { id: string }[] }).rows.map((r) => r.id);
            await tx.query('DELETE FROM skiplock.jobs WHERE id = $1', [ids[3]]);
          }
          return result;
        },
      } as unknown as typeof tx;
      const page = await browseJobs(deleting, { statuses: ['dead'], limit: 10 });
      expect(idsRead).toBe(true);
      expect(page.jobs).toHaveLength(9);
      // 300 dead jobs: 290 are older than this page's ten ids, and the next page starts there.
      expect(page.nextBeforeId).not.toBeNull();
      expect(page.complete).toBe(true);
      const next = await browseJobs(tx, {
        statuses: ['dead'],
        limit: 500,
        beforeId: page.nextBeforeId!,
      });
      expect(next.jobs).toHaveLength(290);
      expect(next.jobs.every((j) => BigInt(j.id) < BigInt(page.jobs.at(-1)!.id))).toBe(true);
    } finally {
      await tx.query('ROLLBACK');
      tx.release();
    }
  });

  it('refuses a bad filter or bound with a SkiplockError naming it, never a database error', async () => {
    const cases: [() => Promise<unknown>, string, RegExp][] = [
      // PostgreSQL text holds no NUL: it failed the statement, unnamed.
      [() => browseJobs(db.pool, { queue: 'a\u0000b' }), 'invalid_filter', /queue must be/],
      [() => browseJobs(db.pool, { workerId: 'w\u0000' }), 'invalid_filter', /workerId must/],
      [
        () => browseJobs(db.pool, { statuses: ['bogus' as 'dead'] }),
        'invalid_filter',
        /statuses must be an array of .*"bogus"/,
      ],
      [() => browseJobs(db.pool, { scanLimit: Number.NaN }), 'invalid_limit', /scanLimit .*NaN/],
      [() => browseJobs(db.pool, { scanLimit: 1e20 }), 'invalid_limit', /scanLimit/],
      [() => readQueueOverview(db.pool, { cap: 2.5 }), 'invalid_limit', /cap .*2\.5/],
      [() => readQueueOverview(db.pool, { maxQueues: 0 }), 'invalid_limit', /maxQueues/],
      [() => readThroughput(db.pool, { cap: -1 }), 'invalid_limit', /cap .*-1/],
      [() => readRecentWorkers(db.pool, { windowMs: 1e10 }), 'invalid_limit', /windowMs/],
      // 19 digits past bigint's maximum: PostgreSQL's "out of range for type bigint" before.
      [
        () => browseJobs(db.pool, { beforeId: '9999999999999999999' }),
        'invalid_id',
        /beforeId must be a job id/,
      ],
      [() => retryDeadJobs(db.pool, ['9999999999999999999']), 'invalid_id', /each id must be/],
      [() => discardDeadJobs(db.pool, ['9223372036854775808']), 'invalid_id', /each id must be/],
      [() => retryDeadJobs(db.pool, '12' as unknown as string[]), 'invalid_ids', /an array/],
    ];
    for (const [read, code, message] of cases) {
      const error = await read().catch((e: unknown) => e);
      expect(error, String(message)).toBeInstanceOf(SkiplockError);
      expect(error).toMatchObject({ code, message: expect.stringMatching(message) });
    }
    // A key with NUL is no job's key (the statement failed there too).
    expect(await findJobsByKey(db.pool, 'key-7\u0000')).toEqual([]);
  });

  it('retries and discards only dead jobs among those listed', async () => {
    const dead = await browseJobs(db.pool, { statuses: ['dead'], limit: 3 });
    const pending = await browseJobs(db.pool, { statuses: ['pending'], limit: 1 });
    const [a, b, c] = dead.jobs.map((j) => j.id);
    const other = pending.jobs[0]!.id;
    expect(await retryDeadJobs(db.pool, [a!, other])).toEqual([a]);
    expect(await discardDeadJobs(db.pool, [b!, c!, a!, other])).toEqual(
      expect.arrayContaining([b, c]),
    );
    const { rows } = await db.pool.query<{ id: string; status: string }>(
      `SELECT id::text, status FROM skiplock.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [[a, b, c, other]],
    );
    expect(Object.fromEntries(rows.map((r) => [r.id, r.status]))).toEqual({
      [a!]: 'pending',
      [other]: 'pending',
    });
  });

  it('skips a dead job another transaction holds instead of waiting for it', async () => {
    const dead = await browseJobs(db.pool, { statuses: ['dead'], limit: 4 });
    const [held, a, b] = dead.jobs.map((j) => j.id);
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM skiplock.jobs WHERE id = $1 FOR UPDATE', [held]);
      // Bounded so that a wait for the held row fails the test instead of hanging it.
      const bound = <T>(work: Promise<T>) =>
        Promise.race([
          work,
          new Promise<never>((_, reject) =>
            setTimeout(() => reject(new Error('waited for the held row')), 5_000),
          ),
        ]);
      expect(await bound(retryDeadJobs(db.pool, [held!, a!]))).toEqual([a]);
      expect(await bound(discardDeadJobs(db.pool, [held!, b!]))).toEqual([b]);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    const { rows } = await db.pool.query<{ id: string; status: string }>(
      `SELECT id::text, status FROM skiplock.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [[held, a, b]],
    );
    expect(Object.fromEntries(rows.map((r) => [r.id, r.status]))).toEqual({
      [held!]: 'dead',
      [a!]: 'pending',
    });
  });
});
