import { beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { useTestDatabase } from '../../../test/support/db.js';
import { ConfigError, createAdmitter, createClient, defineJob } from '../src/index.js';
import { waitFor } from '../../../test/support/wait.js';
import type { ClaimedRow } from '../src/sql/claim.js';
import { quiet, testWorker } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

beforeEach(async () => {
  await db.pool.query('TRUNCATE skiplock.jobs, skiplock.rate_starts');
});

const payload = z.object({ n: z.number() });
const sync = defineJob({
  type: 'partner.sync',
  queue: 'rl',
  payload,
  // Each test's "no start left" check runs one or two round trips after the first starts: a
  // window of 600 ms left little room on a loaded machine.
  rateLimit: { limit: 3, intervalMs: 2_000 },
  handler: async () => {},
});

/** An admitter that takes what it admits, as a worker's does. */
function leasing(room = 100) {
  const adopted: ClaimedRow[] = [];
  const admitter = createAdmitter({
    pool: db.pool,
    logger: quiet,
    lease: {
      workerId: 'w-rate',
      queues: ['rl'],
      types: ['partner.sync'],
      room: () => room,
      adopt: (rows) => adopted.push(...rows),
    },
  });
  return { admitter, adopted };
}

async function statuses() {
  const { rows } = await db.pool.query<{ status: string; attempts: number; n: number }>(
    `SELECT status, attempts, count(*)::int AS n FROM skiplock.jobs GROUP BY 1, 2 ORDER BY 1, 2`,
  );
  return rows;
}

describe('rate limits', () => {
  it('starts at most `limit` per interval; the rest wait without spending an attempt', async () => {
    await client.enqueueMany(
      sync,
      Array.from({ length: 8 }, (_, n) => ({ payload: { n } })),
    );
    const { admitter, adopted } = leasing();
    expect(await admitter.runOnce()).toEqual({ admitted: 3 });
    expect(await admitter.runOnce()).toEqual({ admitted: 0 });
    expect(adopted.map((r) => r.attempts)).toEqual([1, 1, 1]);
    expect(await statuses()).toEqual([
      { status: 'processing', attempts: 1, n: 3 },
      { status: 'waiting', attempts: 0, n: 5 },
    ]);
    // Without a key, the whole job type shares one limit.
    expect(new Set(adopted.map((r) => r.concurrency_key))).toEqual(new Set(['rate:partner.sync']));
    await new Promise((r) => setTimeout(r, 2_050));
    expect(await admitter.runOnce()).toEqual({ admitted: 3 });
  });

  it('counts starts, not running jobs: finishing early frees no start', async () => {
    await client.enqueueMany(
      sync,
      Array.from({ length: 5 }, (_, n) => ({ payload: { n } })),
    );
    const { admitter } = leasing();
    await admitter.runOnce();
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'completed' WHERE status = 'processing'`,
    );
    expect(await admitter.runOnce()).toEqual({ admitted: 0 });
  });

  it('starts a rate-limited job only leased: an admission that cannot take it leaves it waiting', async () => {
    await client.enqueue(sync, { n: 1 });
    // No lease (an operator's client, a worker of other types): never made pending, because a
    // claim could then start it later than the start logged.
    expect(await createAdmitter({ pool: db.pool, logger: quiet }).runOnce()).toEqual({
      admitted: 0,
    });
    expect(await leasing(0).admitter.runOnce()).toEqual({ admitted: 0 });
    expect(await statuses()).toEqual([{ status: 'waiting', attempts: 0, n: 1 }]);
  });

  it('runs a rate-limited job as it is admitted, never from a buffer behind a long job', async () => {
    const starts: number[] = [];
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const fast = defineJob({ type: 'rl.fast', queue: 'rl-run', payload, handler: () => {} });
    const long = defineJob({ type: 'rl.long', queue: 'rl-run', payload, handler: () => held });
    const rated = defineJob({
      type: 'rl.rated',
      queue: 'rl-run',
      payload,
      rateLimit: { limit: 2, intervalMs: 1_000 },
      handler: () => void starts.push(performance.now()),
    });
    const worker = testWorker(db.pool, [fast, long, rated], {
      concurrency: 1,
      pollIntervalMs: 20,
      listen: true,
    });
    await worker.start();
    try {
      // Short jobs first: the worker sizes a prefetch buffer for them.
      await client.enqueueMany(
        fast,
        Array.from({ length: 30 }, (_, n) => ({ payload: { n } })),
      );
      const { id: last } = await client.enqueue(fast, { n: 30 });
      await waitFor(async () => (await client.getJob(last))?.status === 'completed');
      // A long job takes the only slot, and six rate-limited jobs (2 a second) arrive.
      await client.enqueue(long, { n: 0 });
      await waitFor(async () => {
        const { rows } = await db.pool.query(
          `SELECT 1 FROM skiplock.jobs WHERE job_type = 'rl.long' AND status = 'processing'`,
        );
        return rows.length === 1;
      });
      await client.enqueueMany(
        rated,
        Array.from({ length: 6 }, (_, n) => ({ payload: { n } })),
      );
      await new Promise((resolve) => setTimeout(resolve, 2_500));
      release();
      await waitFor(() => starts.length === 6, { timeoutMs: 10_000 });
    } finally {
      await worker.stop();
    }
    // Before: admitted into the buffer at 2 a second while the long job ran, all 6 started at
    // once when it ended. Counted in half the interval: the limit holds at admission, and a
    // handler may start up to that much later than its admission on a loaded machine.
    const most = Math.max(
      ...starts.map((at) => starts.filter((o) => o >= at && o < at + 500).length),
    );
    expect(most).toBeLessThanOrEqual(2);
  });

  it.each([
    ['with no prefetch', 0],
    ['with a prefetch buffer', 1_000],
  ])(
    'keeps the slot an admission leases into from a claim that answers while it runs, %s',
    async (_, maxPrefetch) => {
      const started: string[] = [];
      const other = defineJob({
        type: 'rl.other',
        queue: 'rl-race',
        payload,
        handler: () => void started.push('other'),
      });
      const rated = defineJob({
        type: 'rl.race',
        queue: 'rl-race',
        payload,
        rateLimit: { limit: 1, intervalMs: 60_000 },
        handler: () => void started.push('rated'),
      });
      const pool = db.newPool(6);
      pool.on('error', () => {});
      // Woken by notifications only, so that no claim of its own is running as the admission
      // starts (then the buffer takes the claim's rows, and the slot is the admission's).
      const worker = testWorker(pool, [other, rated], {
        concurrency: 1,
        maxPrefetch,
        pollIntervalMs: 60_000,
        listen: true,
        admitter: { intervalMs: 3_600_000 },
      });
      await worker.start();
      const holder = await db.pool.connect();
      try {
        // One job first, so that the worker has a duration to size its prefetch buffer by.
        await client.enqueue(other, { n: 0 });
        await waitFor(() => started.length === 1, { what: 'the first job to run' });
        started.length = 0;
        // The key's lock, held elsewhere, keeps the worker's admission waiting.
        await holder.query('BEGIN');
        await holder.query(`SELECT pg_advisory_xact_lock(377101, hashtext('rate:rl.race'))`);
        await client.enqueue(rated, { n: 1 });
        // Past the worker's own admission its notification starts (it skips the locked key):
        // running, it would promise the slot away from this one.
        await new Promise((resolve) => setTimeout(resolve, 500));
        const admitting = worker.admitter!.runOnce({ keys: ['rate:rl.race'] });
        await waitFor(async () => {
          const { rows } = await db.pool.query(
            `SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database
             WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()`,
          );
          return rows.length === 1;
        });
        // A job the loop claims meanwhile: into the buffer at most, never into the slot.
        await client.enqueue(other, { n: 2 });
        await new Promise((resolve) => setTimeout(resolve, 300));
        // Before: it ran at once; the admission then leased the rated job (its start logged)
        // behind it, into the buffer, where it started late.
        expect(started).toEqual([]);
        await holder.query('COMMIT');
        await admitting;
        await waitFor(() => started.length === 2, { what: 'both jobs to start' });
        expect(started).toEqual(['rated', 'other']);
      } finally {
        holder.release();
        await worker.stop();
        await pool.end();
      }
    },
  );

  it('keys the limit by payload, each key with its own budget', async () => {
    const perTenant = defineJob({
      type: 'partner.sync',
      queue: 'rl',
      payload: z.object({ tenant: z.string() }),
      rateLimit: { limit: 2, intervalMs: 60_000, key: (p) => `tenant:${p.tenant}` },
      handler: async () => {},
    });
    await client.enqueueMany(
      perTenant,
      ['a', 'a', 'a', 'b', 'b', 'b'].map((tenant) => ({ payload: { tenant } })),
    );
    const { admitter, adopted } = leasing();
    expect(await admitter.runOnce()).toEqual({ admitted: 4 });
    expect(adopted.map((r) => r.concurrency_key).sort()).toEqual([
      'tenant:a',
      'tenant:a',
      'tenant:b',
      'tenant:b',
    ]);
  });

  it('refuses a job without a key, which would start outside the limit, and inserts nothing', async () => {
    const byTenant = defineJob({
      type: 'partner.sync',
      queue: 'rl',
      payload: z.object({ tenant: z.string().nullable() }),
      concurrencyKey: (p) => (p.tenant === null ? null : `tenant:${p.tenant}`),
      rateLimit: { limit: 2, intervalMs: 60_000 },
      handler: async () => {},
    });
    const refused =
      /job type "partner.sync".*concurrency key is null, but the type is rate-limited/;
    await expect(client.enqueue(sync, { n: 1 }, { concurrencyKey: null })).rejects.toThrow(refused);
    await expect(client.enqueue(byTenant, { tenant: null })).rejects.toThrow(refused);
    await expect(
      client.enqueueMany(byTenant, [{ payload: { tenant: 'a' } }, { payload: { tenant: null } }]),
    ).rejects.toThrow(/items\[1\].*concurrency key is null/);
    expect(await statuses()).toEqual([]);
    // A key given per enqueue still counts against the type's limit.
    await client.enqueue(sync, { n: 2 }, { concurrencyKey: 'api:partner' });
    expect(await statuses()).toEqual([{ status: 'waiting', attempts: 0, n: 1 }]);
  });

  it('refuses a key given twice, and a bad limit, naming the job type', () => {
    expect(() =>
      defineJob({
        ...sync,
        concurrencyKey: () => 'k',
        rateLimit: { limit: 1, intervalMs: 1_000, key: () => 'k' },
      }),
    ).toThrow(/job type "partner.sync": give the key once/);
    expect(() => defineJob({ ...sync, rateLimit: { limit: 0, intervalMs: 1_000 } })).toThrow(
      ConfigError,
    );
  });
});
