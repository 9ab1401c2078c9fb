import {
  createClient,
  createSweeper,
  createWorker,
  defineJob,
  type AnyJobDefinition,
  type Logger,
  type Worker,
} from '@skiplock/queue';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createSagaRuntime, defineSaga } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { captureLogs, fast, settled, silent, timeline } from './fixtures.js';
import { metricValue } from '../../../test/support/metrics.js';
import { startTcpProxy } from '../../../test/support/tcp-proxy.js';
import { waitFor } from '../../../test/support/wait.js';

const db = await useTestDatabase();

describe('saga advance by hand-off', () => {
  it('runs every later step on the worker that finished the step before, with no claim of its own', async () => {
    const saga = defineSaga({ name: 'relay', version: 1, input: z.object({ fail: z.boolean() }) })
      .step('a', { ...fast, run: () => 1, compensate: () => {} })
      .step('b', { ...fast, run: () => 2, compensate: () => {} })
      .step('c', {
        ...fast,
        maxAttempts: 1,
        run: (ctx) => {
          if (ctx.input.fail) throw new Error('c failed');
          return 3;
        },
      });
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [saga], logger: silent });
    // Polls once a minute: only LISTEN (for the first step) and hand-offs can move a saga sooner.
    const worker = createWorker({
      pool: db.pool,
      jobs: runtime.jobs,
      logger: silent,
      pollIntervalMs: 60_000,
      sweeper: false,
      retention: false,
    });
    await worker.start();
    await runtime.start(saga, { id: 'ok', input: { fail: false } });
    const ok = await settled(runtime, 'ok');
    await runtime.start(saga, { id: 'undo', input: { fail: true } });
    const undone = await settled(runtime, 'undo');
    await worker.stop();
    await runtime.close();
    expect(ok.status).toBe('completed');
    expect(undone.status).toBe('compensated');
    expect(timeline(undone)).toEqual([
      'a:completed',
      'b:completed',
      'c:failed',
      'undo b:completed',
      'undo a:completed',
    ]);
    // Claimed: the first step of each saga. Handed off: b and c of both sagas, undo's first
    // compensation (enqueued by c's dead-job hook on the worker that ran c), and the compensation
    // of a, which the compensation of b enqueues as it completes.
    expect(await metricValue(worker.metrics, 'skiplock_claim_batch_size_sum')).toBe(2);
    expect(await metricValue(worker.metrics, 'skiplock_jobs_handed_off_total')).toBe(6);
    const { rows } = await db.pool.query<{ locked_by: string }>(
      'SELECT DISTINCT locked_by FROM skiplock.jobs',
    );
    expect(rows).toEqual([{ locked_by: worker.id }]);
  });
});

describe('a start handed to a local worker', () => {
  const three = defineSaga({ name: 'local', version: 1, input: z.object({ n: z.number() }) })
    .step('a', { ...fast, run: (_ctx, input) => ({ a: input.n }) })
    .step('b', { ...fast, run: (ctx) => ({ b: ctx.steps.a.a + 1 }) })
    .step('c', { ...fast, run: (ctx) => ({ c: ctx.steps.b.b + 1, input: ctx.input }) });

  /** A runtime and a worker of one process; the worker polls once a minute (no poll helps). */
  async function local(concurrency = 4) {
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [three], logger: silent });
    const worker = createWorker({
      pool: db.pool,
      jobs: [...runtime.jobs, blocker],
      logger: silent,
      concurrency,
      pollIntervalMs: 60_000,
      sweeper: false,
      retention: false,
    });
    await worker.start();
    runtime.attachWorker(worker);
    return { runtime, worker };
  }

  let release: () => void = () => {};
  let blocked = false;
  const blocker = defineJob({
    type: 'local-blocker',
    payload: z.object({}),
    handler: async () => {
      blocked = true;
      await new Promise<void>((resolve) => (release = resolve));
    },
  });

  it('refuses to attach anything but a worker made by createWorker', async () => {
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [three], logger: silent });
    const lookalike = { id: 'w', start: async () => {}, stop: async () => {}, inFlight: 0 };
    for (const [value, got] of [
      [lookalike, 'object'],
      [null, 'null'],
      [undefined, 'undefined'],
      [[], 'an array'],
      ['worker', 'string'],
    ] as const) {
      const hint =
        got === 'object'
          ? ' (a worker of a second installed copy of @skiplock/queue is not one)'
          : '';
      expect(() => runtime.attachWorker(value as unknown as Worker)).toThrow(
        new TypeError(
          `attachWorker: expected a worker made by createWorker() of @skiplock/queue, got ${got}${hint}`,
        ),
      );
    }
    // Nothing was attached: a start is enqueued for any worker, as without attachWorker.
    await runtime.start(three, { id: 'unattached', input: { n: 1 } });
    const { rows } = await db.pool.query<{ status: string; locked_by: string | null }>(
      `SELECT status::text, locked_by FROM skiplock.jobs WHERE idempotency_key = 'saga:unattached:a'`,
    );
    expect(rows).toEqual([{ status: 'pending', locked_by: null }]);
    const worker = createWorker({ pool: db.pool, jobs: runtime.jobs, logger: silent });
    await worker.start();
    expect((await settled(runtime, 'unattached')).status).toBe('completed');
    await worker.stop();
    await runtime.close();
  });

  it('runs every step of a saga on the starting process, with no claim', async () => {
    const { runtime, worker } = await local();
    await runtime.start(three, { id: 'local-1', input: { n: 1 } });
    const done = await settled(runtime, 'local-1');
    await worker.stop();
    await runtime.close();
    expect(done.status).toBe('completed');
    expect(done.history.map((h) => h.output)).toEqual([
      { a: 1 },
      { b: 2 },
      { c: 3, input: { n: 1 } },
    ]);
    expect(await metricValue(worker.metrics, 'skiplock_claim_batch_size_sum')).toBe(0);
    expect(await metricValue(worker.metrics, 'skiplock_jobs_handed_off_total')).toBe(3);
  });

  it("enqueues the first step for any worker when the start is in the caller's transaction", async () => {
    const { runtime, worker } = await local();
    const tx = await db.pool.connect();
    try {
      await tx.query('BEGIN');
      await runtime.start(three, { id: 'local-tx', input: { n: 1 }, tx });
      await tx.query('COMMIT');
    } finally {
      tx.release();
    }
    expect((await settled(runtime, 'local-tx')).status).toBe('completed');
    await worker.stop();
    await runtime.close();
    // The first step came through LISTEN and a claim; b and c were handed off.
    expect(await metricValue(worker.metrics, 'skiplock_claim_batch_size_sum')).toBe(1);
    expect(await metricValue(worker.metrics, 'skiplock_jobs_handed_off_total')).toBe(2);
  });

  it('enqueues the first step for any worker when the local worker has no free slot', async () => {
    const { runtime, worker } = await local(1);
    const client = createClient({ pool: db.pool, logger: silent });
    blocked = false;
    await client.enqueue(blocker, {});
    await waitFor(() => blocked, { what: 'the blocker to take the only slot' });
    await runtime.start(three, { id: 'local-busy', input: { n: 1 } });
    const { rows } = await db.pool.query<{ status: string; locked_by: string | null }>(
      `SELECT status::text, locked_by FROM skiplock.jobs WHERE idempotency_key = 'saga:local-busy:a'`,
    );
    // Not leased to the busy worker: pending for whichever worker claims it first.
    expect(rows).toEqual([{ status: 'pending', locked_by: null }]);
    release();
    expect((await settled(runtime, 'local-busy')).status).toBe('completed');
    await worker.stop();
    await runtime.close();
    await client.close();
    expect(await metricValue(worker.metrics, 'skiplock_jobs_handed_off_total')).toBe(2);
  });
});

describe('a worker stopped while a start it lent a slot to is open', () => {
  it('waits for the start to commit and hands its first step back to the queue', async () => {
    const saga = defineSaga({ name: 'late', version: 1, input: z.object({}) }).step('a', {
      ...fast,
      run: () => 1,
    });
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [saga], logger: silent });
    // Its own pool, which stop() ends: a job leased to it after that could not be released.
    const worker = createWorker({
      connectionString: db.url,
      jobs: runtime.jobs,
      logger: silent,
      pollIntervalMs: 60_000,
      sweeper: false,
      retention: false,
    });
    await worker.start();
    runtime.attachWorker(worker);
    // Its first claim done, the worker waits for a minute's poll: no claim of its own is held at
    // the lock below, so nothing but the open start can keep its stop() waiting.
    await waitFor(
      async () =>
        (await metricValue(worker.metrics, 'skiplock_claim_batch_size_count')) >= 1 ? true : null,
      { what: "the worker's first claim" },
    );
    // Holds the start's leased insert of its first step (and the worker's claims) at the table.
    const locker = await db.pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE skiplock.jobs IN SHARE MODE');
      const starting = runtime.start(saga, { id: 'late-1', input: {} });
      await waitFor(
        async () => {
          const { rows } = await db.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
             WHERE c.relname = 'jobs' AND NOT l.granted
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
          );
          return rows[0]!.n > 0 ? true : null;
        },
        { what: "the start's insert to wait for the table lock" },
      );
      let stopped = false;
      const stopping = worker.stop().then(() => (stopped = true));
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(stopped).toBe(false);
      await locker.query('COMMIT');
      expect(await starting).toMatchObject({ started: true });
      await stopping;
    } finally {
      // Also when an expect above failed: a lock left held would stall every later test.
      await locker.query('COMMIT').catch(() => {});
      locker.release();
    }
    const { rows } = await db.pool.query<{ status: string; locked_by: string | null }>(
      `SELECT status::text, locked_by FROM skiplock.jobs WHERE idempotency_key = 'saga:late-1:a'`,
    );
    // Released by the stopping worker: pending for any worker, not leased until its lease ran out.
    expect(rows).toEqual([{ status: 'pending', locked_by: null }]);
    const next = createWorker({ pool: db.pool, jobs: runtime.jobs, logger: silent });
    await next.start();
    expect((await settled(runtime, 'late-1')).status).toBe('completed');
    await next.stop();
    await runtime.close();
  });
});

/** A TCP proxy in front of the test database, to drop a connection after its COMMIT. */
async function proxyToDatabase() {
  const target = new URL(db.url);
  return startTcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
}

/**
 * A started worker that polls every 100 ms and has no sweeper: a job leased to it stays leased for
 * the whole test unless the worker itself hands it back (its polls do not take a leased job).
 */
async function leaseKeepingWorker(
  source: { pool: pg.Pool } | { connectionString: string },
  jobs: readonly AnyJobDefinition[],
  logger: Logger,
): Promise<Worker> {
  const worker = createWorker({
    ...source,
    jobs,
    logger,
    pollIntervalMs: 100,
    sweeper: false,
    retention: false,
  });
  await worker.start();
  return worker;
}

describe('a hand-off whose COMMIT fails after the server committed', () => {
  it('hands the next step back to the queue at once instead of leaving it to its lease', async () => {
    const proxy = await proxyToDatabase();
    const runs: string[] = [];
    let cut: Promise<void> | null = null;
    const saga = defineSaga({ name: 'ambiguous', version: 1, input: z.object({}) })
      .step('a', {
        ...fast,
        run: () => {
          runs.push('a');
          // The COMMIT that records a and inserts b leased to this worker: the server commits
          // it, and the worker's connection drops before the answer arrives.
          cut = proxy.cutAfterNextCommit();
          return 1;
        },
      })
      .step('b', {
        ...fast,
        run: () => {
          runs.push('b');
          return 2;
        },
      });
    const { logger, lines } = captureLogs();
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [saga], logger: silent });
    // Its pool goes through the proxy. Without the release, b would stay leased to this worker
    // and never start.
    const worker = await leaseKeepingWorker(
      { connectionString: proxy.urlThrough(db.url) },
      runtime.jobs,
      logger,
    );
    try {
      await runtime.start(saga, { id: 'ambiguous-1', input: {} });
      // (A boolean: waitFor awaits what its check returns, and would wait for the promise.)
      await waitFor(() => cut !== null, { what: 'step a to run' });
      await cut;
      const done = await settled(runtime, 'ambiguous-1');
      expect(done.status).toBe('completed');
      // a committed once (its retry found its lease gone), b ran once, through the queue.
      expect(runs).toEqual(['a', 'b']);
      const released = lines.filter((l) => l.reason === 'handoff_released');
      expect(released).toHaveLength(1);
      const { rows } = await db.pool.query<{ id: string }>(
        `SELECT id::text AS id FROM skiplock.jobs WHERE idempotency_key = 'saga:ambiguous-1:b'`,
      );
      expect(released[0]!.jobId).toBe(rows[0]!.id);
    } finally {
      await worker.stop();
      await runtime.close();
      await proxy.close();
    }
  });
});

describe("a dead step's hook whose COMMIT fails after the server committed", () => {
  it('hands the first compensation back to the queue: the saga compensates', async () => {
    const proxy = await proxyToDatabase();
    const undone: string[] = [];
    let cut: Promise<void> | null = null;
    const saga = defineSaga({ name: 'ambiguous-dead', version: 1, input: z.object({}) })
      .step('a', { ...fast, run: () => 1, compensate: () => void undone.push('a') })
      .step('b', {
        ...fast,
        maxAttempts: 1,
        run: () => {
          // b goes dead; the COMMIT of its dead state and of a's compensation, inserted leased
          // to this worker by the hook, reaches the server, and its answer does not come back.
          cut = proxy.cutAfterNextCommit();
          throw new Error('b failed');
        },
      });
    const { logger, lines } = captureLogs();
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [saga], logger: silent });
    const worker = await leaseKeepingWorker(
      { connectionString: proxy.urlThrough(db.url) },
      runtime.jobs,
      logger,
    );
    try {
      await runtime.start(saga, { id: 'ambiguous-dead-1', input: {} });
      await waitFor(() => cut !== null, { what: 'step b to run' });
      await cut;
      expect((await settled(runtime, 'ambiguous-dead-1')).status).toBe('compensated');
      expect(undone).toEqual(['a']);
      expect(lines.filter((l) => l.reason === 'handoff_released')).toHaveLength(1);
    } finally {
      await worker.stop();
      await runtime.close();
      await proxy.close();
    }
  });
});

describe('a start whose COMMIT fails after the server committed', () => {
  it('hands its first step, leased to the local worker, back to the queue', async () => {
    const proxy = await proxyToDatabase();
    const saga = defineSaga({ name: 'ambiguous-start', version: 1, input: z.object({}) }).step(
      'a',
      { ...fast, run: () => 1 },
    );
    const { logger, lines } = captureLogs();
    // The runtime's pool goes through the proxy, the worker's does not.
    const runtime = createSagaRuntime({
      connectionString: proxy.urlThrough(db.url),
      sagas: [saga],
      logger: silent,
    });
    const worker = await leaseKeepingWorker({ pool: db.pool }, runtime.jobs, logger);
    runtime.attachWorker(worker);
    try {
      const cut = proxy.cutAfterNextCommit();
      // The caller cannot tell whether it started: the COMMIT's answer never came.
      await expect(runtime.start(saga, { id: 'ambiguous-start-1', input: {} })).rejects.toThrow();
      await cut;
      expect((await settled(runtime, 'ambiguous-start-1')).status).toBe('completed');
      expect(lines.filter((l) => l.reason === 'handoff_released')).toHaveLength(1);
      // Started again by a caller that retries: the saga is found, not started twice.
      expect(await runtime.start(saga, { id: 'ambiguous-start-1', input: {} })).toMatchObject({
        started: false,
      });
    } finally {
      await worker.stop();
      await runtime.close();
      await proxy.close();
    }
  });
});

describe('parallel starts handed to a local worker', () => {
  it('promise each free slot once: the rest are queued, not leased to the busy worker', async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    let running = 0;
    // A queue of its own: jobs earlier tests left in the shared one, of types this worker does
    // not define, are handed back and claimed again as they come due, and a claim after one
    // took a gated job into the buffer (a CI run saw 3 leased).
    const gated = defineSaga({
      name: 'gated',
      version: 1,
      input: z.object({}),
      queue: 'gated',
    }).step('wait', {
      ...fast,
      run: async () => {
        running += 1;
        await gate;
        return 1;
      },
    });
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [gated], logger: silent });
    const worker = createWorker({
      pool: db.pool,
      jobs: runtime.jobs,
      logger: silent,
      concurrency: 2,
      pollIntervalMs: 60_000,
      listen: false,
      sweeper: false,
      retention: false,
    });
    await worker.start();
    runtime.attachWorker(worker);
    const ids = Array.from({ length: 8 }, (_, i) => `gated-${i}`);
    await Promise.all(ids.map((id) => runtime.start(gated, { id, input: {} })));
    await waitFor(() => running === 2, { what: 'the two free slots to run a step each' });
    const { rows } = await db.pool.query<{ leased: number; pending: number }>(
      `SELECT count(*) FILTER (WHERE locked_by IS NOT NULL)::int AS leased,
              count(*) FILTER (WHERE status = 'pending')::int AS pending
       FROM skiplock.jobs WHERE idempotency_key LIKE 'saga:gated-%'`,
    );
    // Two slots: two first steps handed off; with no LISTEN and a one-minute poll, the other six
    // wait in the queue for any worker instead of in this worker's buffer.
    expect(rows).toEqual([{ leased: 2, pending: 6 }]);
    expect(await metricValue(worker.metrics, 'skiplock_jobs_handed_off_total')).toBe(2);
    open();
    await worker.stop();
    await runtime.close();
  });
});

describe('a hand-off from a step that worked on after its transaction opened', () => {
  it('leases the next step from the insert, so a sweep leaves it with the worker running it', async () => {
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    let bRuns = 0;
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const saga = defineSaga({ name: 'late-handoff', version: 1, input: z.object({}) })
      .step('a', {
        ...fast,
        run: async (ctx) => {
          await ctx.transaction((tx) => tx.query('SELECT 1'));
          // The completing transaction is open from here: work on for longer than b's lease.
          await sleep(3_500);
          return 'a';
        },
      })
      .step('b', {
        ...fast,
        // Long enough that most of it is still left when a loaded run has started b and read it.
        leaseMs: 3_000,
        run: async () => {
          bRuns += 1;
          await held;
          return 'b';
        },
      });
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [saga], logger: silent });
    const worker = createWorker({
      pool: db.pool,
      jobs: runtime.jobs,
      logger: silent,
      concurrency: 2,
      pollIntervalMs: 20,
      heartbeatIntervalMs: 2_700,
      sweeper: false,
      retention: false,
    });
    await worker.start();
    const sweeper = createSweeper({ pool: db.pool, jobs: runtime.jobs, logger: silent });
    try {
      await runtime.start(saga, { id: 'lease-from-insert', input: {} });
      await waitFor(() => (bRuns === 1 ? true : null), { what: 'b to start' });
      const { rows } = await db.pool.query<{ left_ms: number; locked_by: string }>(
        `SELECT extract(epoch FROM lease_expires_at - now()) * 1000 AS left_ms, locked_by
         FROM skiplock.jobs WHERE idempotency_key = 'saga:lease-from-insert:b'`,
      );
      // Its lease counts from the hand-off's insert: most of b's 3,000 ms are left.
      expect(Number(rows[0]!.left_ms)).toBeGreaterThan(1_500);
      expect(rows[0]!.locked_by).toBe(worker.id);
      expect(await sweeper.runOnce()).toMatchObject({ recovered: 0 });
      release();
      const view = await settled(runtime, 'lease-from-insert');
      expect(view.status).toBe('completed');
      expect(timeline(view)).toEqual(['a:completed', 'b:completed']);
      expect(bRuns).toBe(1);
    } finally {
      release();
      await worker.stop({ timeoutMs: 1_000 });
      await runtime.close();
    }
  });
});
