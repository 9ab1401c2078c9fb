import { beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { ConfigError, createAdmitter, createClient, defineJob } from '../src/index.js';
import { fastBackoff, quiet, testWorker } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

beforeEach(async () => {
  await db.pool.query('TRUNCATE skiplock.jobs');
});

const refresh = defineJob({
  type: 'refresh',
  queue: 'single',
  payload: z.object({ account: z.string(), v: z.number() }),
  singletonKey: (p) => `account:${p.account}`,
  handler: async () => {},
});

async function jobs() {
  const { rows } = await db.pool.query<{
    id: string;
    status: string;
    v: number;
    delayed: boolean;
  }>(
    `SELECT id::text AS id, status, (payload->>'v')::int AS v, run_at > now() + interval '30 s' AS delayed
     FROM skiplock.jobs ORDER BY id`,
  );
  return rows;
}

/** Whether a job is a stopped run that still holds its lease. */
async function isStoppedRunLive(id: string) {
  const { rows } = await db.pool.query<{ live: boolean }>(
    `SELECT status = 'cancelled' AND lease_expires_at > now() AS live FROM skiplock.jobs
     WHERE id = $1`,
    [id],
  );
  return rows[0]!.live;
}

/** What a worker's claim does to a job, for the rules about running jobs. */
async function start(id: string) {
  await db.pool.query(
    `UPDATE skiplock.jobs SET status = 'processing', attempts = 1, locked_by = 'w',
       locked_at = now(), lease_expires_at = now() + interval '30 s' WHERE id = $1`,
    [id],
  );
}

describe('singleton keys', () => {
  it('keeps the queued job: a second enqueue returns its id and inserts nothing', async () => {
    const first = await client.enqueue(refresh, { account: 'a', v: 1 });
    const second = await client.enqueue(refresh, { account: 'a', v: 2 });
    const other = await client.enqueue(refresh, { account: 'b', v: 3 });
    expect(first.inserted).toBe(true);
    expect(second).toEqual({ id: first.id, inserted: false });
    expect(other.inserted).toBe(true);
    expect((await jobs()).map((j) => j.v)).toEqual([1, 3]);
    expect((await client.getJob(first.id))!.singletonKey).toBe('account:a');
  });

  it('100 concurrent enqueues of one key over four pools leave one pending job', async () => {
    const clients = Array.from({ length: 4 }, () =>
      createClient({ pool: db.newPool(10), logger: quiet }),
    );
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, v) =>
        clients[v % 4]!.enqueue(refresh, { account: 'race', v }),
      ),
    );
    expect(await jobs()).toHaveLength(1);
    expect(new Set(results.map((r) => r.id)).size).toBe(1);
    expect(results.filter((r) => r.inserted)).toHaveLength(1);
  });

  it('replace (debounce) gives the queued job the new payload and run time', async () => {
    const first = await client.enqueue(
      refresh,
      { account: 'a', v: 1 },
      { singletonMode: 'replace' },
    );
    const second = await client.enqueue(
      refresh,
      { account: 'a', v: 2 },
      { singletonMode: 'replace', delayMs: 60_000 },
    );
    expect(second).toEqual({ id: first.id, inserted: false });
    expect(await jobs()).toEqual([{ id: first.id, status: 'pending', v: 2, delayed: true }]);
  });

  it('a running job does not hold the key, unless the jobs ask for it', async () => {
    const first = await client.enqueue(refresh, { account: 'a', v: 1 });
    await start(first.id);
    const next = await client.enqueue(refresh, { account: 'a', v: 2 });
    expect(next.inserted).toBe(true);

    await db.pool.query('TRUNCATE skiplock.jobs');
    const running = { singletonRunning: true } as const;
    const held = await client.enqueue(refresh, { account: 'r', v: 1 }, running);
    await start(held.id);
    expect(await client.enqueue(refresh, { account: 'r', v: 2 }, running)).toEqual({
      id: held.id,
      inserted: false,
    });
    // Replacing never touches the running job's payload.
    expect(
      await client.enqueue(
        refresh,
        { account: 'r', v: 3 },
        { ...running, singletonMode: 'replace' },
      ),
    ).toEqual({ id: held.id, inserted: false });
    expect(await jobs()).toEqual([{ id: held.id, status: 'processing', v: 1, delayed: false }]);
  });

  it('throttle lets one job through per window, whatever became of it', async () => {
    // Windows are aligned to the epoch. 2 s, not less: the first two enqueues must fall in one
    // window, and on a loaded CI machine three statements once took longer than a 300 ms one.
    const windowMs = 2_000;
    const throttled = { singletonMode: 'throttle', singletonWindowMs: windowMs } as const;
    const untilNextWindow = () => windowMs - (Date.now() % windowMs);
    // Start right after a window boundary so the two enqueues share a window.
    await new Promise((r) => setTimeout(r, untilNextWindow() + 20));
    const first = await client.enqueue(refresh, { account: 't', v: 1 }, throttled);
    await db.pool.query(`UPDATE skiplock.jobs SET status = 'completed', completed_at = now()`);
    const second = await client.enqueue(refresh, { account: 't', v: 2 }, throttled);
    expect(second).toEqual({ id: first.id, inserted: false });
    await new Promise((r) => setTimeout(r, untilNextWindow() + 50));
    const third = await client.enqueue(refresh, { account: 't', v: 3 }, throttled);
    expect(third.inserted).toBe(true);
    expect((await jobs()).map((j) => j.v)).toEqual([1, 3]);
  });

  it('a bulk enqueue keeps one queued job per key, within the bulk and against the table', async () => {
    await client.enqueue(refresh, { account: 'a', v: 0 });
    const results = await client.enqueueMany(refresh, [
      { payload: { account: 'a', v: 1 } },
      { payload: { account: 'b', v: 2 } },
      { payload: { account: 'b', v: 3 } },
    ]);
    expect(results.map((r) => r.inserted)).toEqual([false, true, false]);
    expect(results[2]!.id).toBe(results[1]!.id);
    expect((await jobs()).map((j) => j.v)).toEqual([0, 2]);
  });

  it('a job waiting for a concurrency slot holds its singleton key', async () => {
    const keyed = defineJob({ ...refresh, type: 'refresh.keyed', concurrencyKey: () => 'api' });
    const first = await client.enqueue(keyed, { account: 'w', v: 1 });
    expect((await client.getJob(first.id))!.status).toBe('waiting');
    expect(await client.enqueue(keyed, { account: 'w', v: 2 })).toEqual({
      id: first.id,
      inserted: false,
    });
  });

  it('a replace sends an admitted job with a key back to wait for a slot of its new key', async () => {
    const edit = defineJob({
      type: 'reindex',
      queue: 'single',
      payload: z.object({ doc: z.string(), region: z.string() }),
      concurrencyKey: (p) => `region:${p.region}`,
      concurrencyLimit: 1,
      singletonKey: (p) => `doc:${p.doc}`,
      singletonMode: 'replace',
      handler: async () => {},
    });
    const other = defineJob({
      type: 'region.sync',
      queue: 'single',
      payload: z.object({ region: z.string() }),
      concurrencyKey: (p) => `region:${p.region}`,
      concurrencyLimit: 1,
      handler: async () => {},
    });
    const admit = () => createAdmitter({ pool: db.pool, logger: quiet }).runOnce();
    const { id } = await client.enqueue(edit, { doc: 'd1', region: 'us' });
    await admit();
    const state = async () =>
      (
        await db.pool.query(
          `SELECT status::text, concurrency_key AS key, run_at > now() AS later
           FROM skiplock.jobs WHERE id = $1`,
          [id],
        )
      ).rows[0];
    expect(await state()).toEqual({ status: 'pending', key: 'region:us', later: false });
    // Debounced an hour ahead: it gives its slot back, and the key's due job takes it.
    await client.enqueue(edit, { doc: 'd1', region: 'us' }, { delayMs: 3_600_000 });
    const { id: due } = await client.enqueue(other, { region: 'us' });
    await admit();
    // Before: still pending, holding the slot an hour while the due job waited.
    expect(await state()).toEqual({ status: 'waiting', key: 'region:us', later: true });
    const { rows } = await db.pool.query(`SELECT status::text FROM skiplock.jobs WHERE id = $1`, [
      due,
    ]);
    expect(rows).toEqual([{ status: 'pending' }]);
    // Its payload moves it to another region: the key is the new payload's (before: region:us).
    await client.enqueue(edit, { doc: 'd1', region: 'eu' });
    expect(await state()).toEqual({ status: 'waiting', key: 'region:eu', later: false });
    await admit();
    expect(await state()).toEqual({ status: 'pending', key: 'region:eu', later: false });
  });

  it("an operator's retry keeps a queued job's key, and drops a dead or cancelled job's", async () => {
    // Waiting for a slot, or for its retry (a job that holds its key while running), the job is
    // its key's one queued job: retried, it must stay so, or the next enqueue queues a second.
    const keyed = defineJob({ ...refresh, type: 'refresh.keyed', concurrencyKey: () => 'api' });
    const waiting = await client.enqueue(keyed, { account: 'w', v: 1 });
    // (The retry admits its key, whose slot is free: the job is pending now.)
    expect(await client.retryJob(waiting.id)).toBe(true);
    expect(await client.enqueue(keyed, { account: 'w', v: 2 })).toEqual({
      id: waiting.id,
      inserted: false,
    });

    const running = { singletonRunning: true } as const;
    const failed = await client.enqueue(refresh, { account: 'r', v: 1 }, running);
    await start(failed.id);
    // What a failed attempt leaves: retryable later, still holding its key.
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'retryable', locked_by = NULL, locked_at = NULL,
         lease_expires_at = NULL, run_at = now() + interval '5 minutes' WHERE id = $1`,
      [failed.id],
    );
    expect(await client.retryJob(failed.id)).toBe(true);
    expect(await client.enqueue(refresh, { account: 'r', v: 2 }, running)).toEqual({
      id: failed.id,
      inserted: false,
    });

    // A dead or cancelled job may have been succeeded by another of its key: its retry runs
    // whatever else holds the key.
    const dead = await client.enqueue(refresh, { account: 'd', v: 1 });
    const cancelled = await client.enqueue(refresh, { account: 'c', v: 1 });
    await db.pool.query(`UPDATE skiplock.jobs SET status = 'dead', attempts = 5 WHERE id = $1`, [
      dead.id,
    ]);
    expect(await client.cancelJob(cancelled.id)).toBe(true);
    expect(await client.retryJob(dead.id)).toBe(true);
    expect(await client.retryJob(cancelled.id)).toBe(true);
    expect((await client.getJob(dead.id))!.singletonKey).toBeNull();
    expect((await client.getJob(cancelled.id))!.singletonKey).toBeNull();
    expect((await client.enqueue(refresh, { account: 'd', v: 2 })).inserted).toBe(true);
  });

  it('refuses contradictory options, naming them, and stores nothing', async () => {
    await expect(
      client.enqueue(
        refresh,
        { account: 'x', v: 1 },
        { singletonMode: 'replace', idempotencyKey: 'k' },
      ),
    ).rejects.toThrow(/singletonMode "replace" cannot be combined with an idempotencyKey/);
    await expect(
      client.enqueue(refresh, { account: 'x', v: 1 }, { singletonMode: 'throttle' }),
    ).rejects.toThrow(ConfigError);
    await expect(
      client.enqueue(refresh, { account: 'x', v: 1 }, { singletonMode: 'debounce' as 'keep' }),
    ).rejects.toThrow(/singletonMode/);
    expect(() => defineJob({ ...refresh, singletonMode: 'throttle' })).toThrow(
      /needs singletonWindowMs/,
    );
    expect(await jobs()).toEqual([]);
  });

  it('a started job that fails while the next one is queued retries without a collision', async () => {
    // The handler queues the next job of its key, then fails: the retry must settle (the claim
    // cleared the started job's key), leaving both queued, nothing stuck in processing.
    let runs = 0;
    const flaky = defineJob({
      ...refresh,
      type: 'refresh.flaky',
      backoff: fastBackoff,
      handler: async (p: { account: string; v: number }) => {
        runs += 1;
        if (runs === 1) {
          await client.enqueue(flaky, { account: p.account, v: 2 });
          throw new Error('first run fails');
        }
      },
    });
    await client.enqueue(flaky, { account: 'f', v: 1 });
    const worker = testWorker(db.pool, [flaky], { queues: ['single'] });
    expect(await worker.runOnce()).toBe(1);
    expect((await jobs()).map((j) => `${j.v}:${j.status}`)).toEqual(['1:retryable', '2:pending']);
  });

  it('a run an operator stopped holds its singletonRunning key until its handler returns', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const signals: AbortSignal[] = [];
    const solo = defineJob({
      ...refresh,
      type: 'refresh.solo',
      singletonRunning: true,
      // Long enough that the stopped run's lease (not renewed) outlasts the enqueues below on a
      // slow machine; the worker sees the stop at its first renewal, 2 s in.
      leaseMs: 6_000,
      // Ignores its signal until the gate opens: a handler busy in a call it cannot abort.
      handler: async (_p, ctx) => {
        signals.push(ctx.signal);
        await gate;
      },
    });
    const first = await client.enqueue(solo, { account: 's', v: 1 });
    const worker = testWorker(db.pool, [solo], { queues: ['single'] });
    const run = worker.runOnce();
    try {
      await waitFor(() => signals.length === 1);
      expect(await client.cancelJob(first.id, { running: true })).toBe(true);
      await waitFor(() => signals[0]!.aborted, { timeoutMs: 5_000 });
      expect(await isStoppedRunLive(first.id)).toBe(true);
      // Before: the stop let go of the key at once, and this inserted a job that a worker could
      // start beside the handler still running.
      expect(await client.enqueue(solo, { account: 's', v: 2 })).toEqual({
        id: first.id,
        inserted: false,
      });
      expect(
        await client.enqueue(solo, { account: 's', v: 3 }, { singletonMode: 'replace' }),
      ).toEqual({ id: first.id, inserted: false });
      expect(await jobs()).toEqual([{ id: first.id, status: 'cancelled', v: 1, delayed: false }]);
      release();
      await run;
      // The handler returned and its worker cleared the lease (long before it ran out): the key
      // is free.
      await waitFor(async () => !(await isStoppedRunLive(first.id)));
      const { rows } = await db.pool.query<{ cleared: boolean }>(
        'SELECT lease_expires_at IS NULL AS cleared FROM skiplock.jobs WHERE id = $1',
        [first.id],
      );
      expect(rows).toEqual([{ cleared: true }]);
    } finally {
      release();
      await run;
      await worker.stop();
    }
    const next = await client.enqueue(solo, { account: 's', v: 4 });
    expect(next.inserted).toBe(true);
    expect((await jobs()).map((j) => `${j.v}:${j.status}`)).toEqual(['1:cancelled', '4:pending']);
  });

  it("a stopped run's lease that ran out gives up its key to the next enqueue", async () => {
    // Its worker died or hangs: nothing clears the lease, and a unique index cannot compare it
    // with now(). The enqueue that meets it clears it.
    const running = { singletonRunning: true } as const;
    for (const mode of ['keep', 'replace'] as const) {
      const stopped = await client.enqueue(refresh, { account: mode, v: 1 }, running);
      await start(stopped.id);
      expect(await client.cancelJob(stopped.id, { running: true })).toBe(true);
      // Still live: held.
      expect(
        await client.enqueue(refresh, { account: mode, v: 2 }, { ...running, singletonMode: mode }),
      ).toEqual({ id: stopped.id, inserted: false });
      await db.pool.query(
        `UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`,
        [stopped.id],
      );
      const next = await client.enqueue(
        refresh,
        { account: mode, v: 3 },
        { ...running, singletonMode: mode },
      );
      expect(next.inserted).toBe(true);
      const { rows } = await db.pool.query<{ lease_expires_at: Date | null; status: string }>(
        'SELECT status, lease_expires_at FROM skiplock.jobs WHERE id = $1',
        [stopped.id],
      );
      expect(rows).toEqual([{ status: 'cancelled', lease_expires_at: null }]);
    }
    expect((await jobs()).map((j) => `${j.v}:${j.status}`)).toEqual([
      '1:cancelled',
      '3:pending',
      '1:cancelled',
      '3:pending',
    ]);
  });
});
