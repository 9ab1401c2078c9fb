import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createClient,
  createWorker,
  defineJob,
  JobTimeoutError,
  NonRetryableError,
  type JobContext,
} from '../src/index.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { fastBackoff, jobRow, quiet, testWorker } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

/** Until one statement of this database waits for a lock: the claim held by a test's SHARE lock. */
const claimWaitingForLock = () =>
  waitFor(
    async () =>
      (
        await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
           WHERE datname = current_database() AND wait_event_type = 'Lock'`,
        )
      ).rows[0]!.n === 1,
    { what: 'the claim waiting for the lock' },
  );

/** The row's xmin: it changes with every committed write of the row. */
const rowVersion = async (id: string) =>
  (
    await db.pool.query<{ v: string }>('SELECT xmin::text AS v FROM skiplock.jobs WHERE id = $1', [
      id,
    ])
  ).rows[0]!.v;

describe('worker outcomes', () => {
  it('retries a failing job with backoff in the database clock, then dead with every error kept', async () => {
    const attempts: number[] = [];
    const flaky = defineJob({
      type: 'always-fails',
      payload: z.object({}),
      maxAttempts: 3,
      backoff: { baseMs: 60_000, maxMs: 60_000, jitter: 0 },
      handler: async (_p, ctx) => {
        attempts.push(ctx.job.attempt);
        throw new Error(`boom ${ctx.job.attempt}`);
      },
    });
    const logs = captureLogs();
    const worker = testWorker(db.pool, [flaky], { logger: logs.logger });
    const { id } = await client.enqueue(flaky, {});

    expect(await worker.runOnce()).toBe(1);
    let row = await jobRow(db.pool, id);
    expect(row.status).toBe('retryable');
    const { rows } = await db.pool.query<{ ahead: number }>(
      'SELECT (extract(epoch FROM run_at - now()) * 1000)::float8 AS ahead FROM skiplock.jobs WHERE id = $1',
      [id],
    );
    expect(rows[0]!.ahead).toBeGreaterThan(50_000);
    // Not claimable before its run_at.
    expect(await worker.runOnce()).toBe(0);

    for (let i = 0; i < 2; i++) {
      await db.pool.query(`UPDATE skiplock.jobs SET run_at = now() WHERE id = $1`, [id]);
      expect(await worker.runOnce()).toBe(1);
    }
    row = await jobRow(db.pool, id);
    expect(attempts).toEqual([1, 2, 3]);
    expect(row.status).toBe('dead');
    expect(row.attempts).toBe(3);
    expect(row.last_error).toBe('boom 3');
    expect(row.errors.map((e) => [e.attempt, e.reason, e.message])).toEqual([
      [1, 'error', 'boom 1'],
      [2, 'error', 'boom 2'],
      [3, 'error', 'boom 3'],
    ]);
    const retryLogs = logs.lines.filter((l) => l.reason === 'error');
    expect(retryLogs).toHaveLength(2);
    expect(retryLogs[0]).toMatchObject({ jobId: id, jobType: 'always-fails', attempt: 1 });
    expect(logs.lines.find((l) => l.reason === 'max_attempts')).toMatchObject({
      jobId: id,
      attempt: 3,
    });
  });

  it('sends a job with an invalid stored payload to dead without running the handler', async () => {
    let ran = 0;
    const strict = defineJob({
      type: 'strict',
      payload: z.object({ email: z.string().email() }),
      handler: async () => {
        ran += 1;
      },
    });
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO skiplock.jobs (job_type, payload) VALUES ('strict', '{"email": 42}') RETURNING id::text`,
    );
    const logs = captureLogs();
    await testWorker(db.pool, [strict], { logger: logs.logger }).runOnce();
    const row = await jobRow(db.pool, rows[0]!.id);
    expect(ran).toBe(0);
    expect(row.status).toBe('dead');
    expect(row.last_error).toContain('payload.email');
    expect(row.errors[0]).toMatchObject({ reason: 'invalid_payload', attempt: 1 });
    expect(logs.reasons()).toContain('invalid_payload');
  });

  it('hands back a job of a type it does not define, attempt given back, for a worker that defines it', async () => {
    let ran = 0;
    const known = defineJob({
      type: 'known',
      payload: z.object({}),
      handler: async () => void (ran += 1),
    });
    // One attempt only: a worker that cannot run it must not spend it.
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO skiplock.jobs (job_type, payload, max_attempts)
       VALUES ('mystery', '{}', 1) RETURNING id::text`,
    );
    const id = rows[0]!.id;
    const logs = captureLogs();
    const backoff = { baseMs: 200, factor: 1, jitter: 0 };
    const old = testWorker(db.pool, [known], { logger: logs.logger, unknownTypeBackoff: backoff });
    await old.runOnce();
    expect(ran).toBe(0);
    // Due again after the worker's unknownTypeBackoff with its attempt given back: a worker of
    // the old deploy in a rolling one no longer kills a job of the new one (before: dead here).
    const row = await jobRow(db.pool, id);
    expect(row).toMatchObject({ status: 'retryable', attempts: 0 });
    expect(row.errors).toEqual([
      expect.objectContaining({
        attempt: 1,
        reason: 'unknown_type',
        message: expect.stringMatching(/^unknown job type "mystery"/),
      }),
    ]);
    const { rows: due } = await db.pool.query<{ ms: number }>(
      `SELECT extract(epoch FROM run_at - updated_at) * 1000 AS ms FROM skiplock.jobs WHERE id = $1`,
      [id],
    );
    expect(Number(due[0]!.ms)).toBeCloseTo(200, -1);
    expect(logs.lines.find((l) => l.reason === 'unknown_type_released')).toMatchObject({
      level: 40,
      jobType: 'mystery',
      delayMs: 200,
      handedBack: 1,
    });
    // A worker of the new deploy, which defines it, runs it once it is due, on its one attempt.
    let mysteries = 0;
    const mystery = defineJob({
      type: 'mystery',
      payload: z.object({}),
      handler: async () => void (mysteries += 1),
    });
    await waitFor(async () => {
      await testWorker(db.pool, [known, mystery]).runOnce();
      return (await jobRow(db.pool, id)).status === 'completed' || null;
    });
    expect(mysteries).toBe(1);
    expect((await jobRow(db.pool, id)).attempts).toBe(1);
  });

  it('sends a job of a type it does not define to dead at its unknownTypeMaxAttempts-th claim, whatever its own maxAttempts', async () => {
    const known = defineJob({ type: 'known', payload: z.object({}), handler: async () => {} });
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO skiplock.jobs (job_type, payload, max_attempts)
       VALUES ('mystery', '{}', 1000) RETURNING id::text`,
    );
    const id = rows[0]!.id;
    const logs = captureLogs();
    const worker = testWorker(db.pool, [known], {
      logger: logs.logger,
      unknownTypeBackoff: { baseMs: 0 },
      unknownTypeMaxAttempts: 3,
    });
    for (const handedBack of [1, 2]) {
      await worker.runOnce();
      expect(await jobRow(db.pool, id)).toMatchObject({ status: 'retryable', attempts: 0 });
      expect(logs.lines.filter((l) => l.reason === 'unknown_type_released')).toHaveLength(
        handedBack,
      );
    }
    await worker.runOnce();
    const row = await jobRow(db.pool, id);
    // The last claim is charged, as the kill on the first claim was before.
    expect(row).toMatchObject({ status: 'dead', attempts: 1 });
    expect(row.last_error).toMatch(/^unknown_type: unknown job type "mystery"/);
    expect(row.errors.map((e) => e.reason)).toEqual([
      'unknown_type',
      'unknown_type',
      'unknown_type',
    ]);
    expect(logs.reasons()).toContain('unknown_type');
    // An operator's retry (once a worker that defines the type runs, say): the count starts
    // again, so a worker that does not define it hands it back rather than kill it at once
    // (before: dead on this claim, its history counting 3).
    const client = createClient({ pool: db.pool, logger: quiet });
    expect(await client.retryJob(id)).toBe(true);
    await worker.runOnce();
    expect(await jobRow(db.pool, id)).toMatchObject({ status: 'retryable', attempts: 0 });
    expect(logs.lines.at(-1)).toMatchObject({ reason: 'unknown_type_released', handedBack: 1 });
    // Nothing claimable left for later tests: their workers would hand it back each time.
    await db.pool.query('DELETE FROM skiplock.jobs WHERE id = $1', [id]);
  });

  it('refuses an unknownTypeBackoff or unknownTypeMaxAttempts it cannot use', () => {
    const known = defineJob({ type: 'known', payload: z.object({}), handler: async () => {} });
    expect(() => testWorker(db.pool, [known], { unknownTypeBackoff: { baseMs: -1 } })).toThrow(
      /unknownTypeBackoff\.baseMs/,
    );
    for (const bad of [0, 21]) {
      expect(() => testWorker(db.pool, [known], { unknownTypeMaxAttempts: bad })).toThrow(
        /unknownTypeMaxAttempts/,
      );
    }
  });

  it('sends a non-retryable error to dead at once', async () => {
    class CardDeclined extends Error {}
    const declines = defineJob({
      type: 'declines',
      payload: z.object({ which: z.string() }),
      maxAttempts: 10,
      nonRetryable: [CardDeclined],
      handler: async ({ which }) => {
        throw which === 'own'
          ? new CardDeclined('card declined')
          : new NonRetryableError('bad request');
      },
    });
    const a = await client.enqueue(declines, { which: 'own' });
    const b = await client.enqueue(declines, { which: 'builtin' });
    await testWorker(db.pool, [declines]).runOnce();
    for (const id of [a.id, b.id]) {
      const row = await jobRow(db.pool, id);
      expect(row.status).toBe('dead');
      expect(row.attempts).toBe(1);
      expect(row.errors[0]!.reason).toBe('non_retryable');
    }
  });

  it('aborts a handler at its timeout and fails the attempt with reason timeout', async () => {
    let seenReason: unknown;
    const slow = defineJob({
      type: 'slow',
      payload: z.object({}),
      timeoutMs: 50,
      maxAttempts: 2,
      backoff: fastBackoff,
      handler: async (_p, ctx: JobContext) =>
        new Promise<void>((_resolve, reject) => {
          ctx.signal.addEventListener('abort', () => {
            seenReason = ctx.signal.reason;
            reject(ctx.signal.reason as Error);
          });
        }),
    });
    const stubborn = defineJob({
      type: 'ignores-signal',
      payload: z.object({}),
      timeoutMs: 50,
      maxAttempts: 1,
      handler: () => new Promise<void>((resolve) => setTimeout(resolve, 2_000)),
    });
    const a = await client.enqueue(slow, {});
    const b = await client.enqueue(stubborn, {});
    await testWorker(db.pool, [slow, stubborn]).runOnce();
    expect(seenReason).toBeInstanceOf(JobTimeoutError);
    const rowA = await jobRow(db.pool, a.id);
    expect(rowA.status).toBe('retryable');
    expect(rowA.errors[0]).toMatchObject({ reason: 'timeout' });
    const rowB = await jobRow(db.pool, b.id);
    expect(rowB.status).toBe('dead');
    expect(rowB.errors[0]).toMatchObject({ reason: 'timeout' });
  });

  it('keeps the slot of a handler that outlives its attempt until it returns', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let stubbornReturned = false;
    let returnedWhenNextStarted: boolean | null = null;
    const stubborn = defineJob({
      type: 'overruns',
      queue: 'overrun',
      payload: z.object({}),
      timeoutMs: 50,
      maxAttempts: 1,
      // Ignores its signal: the attempt ends at its timeout, the handler only at the gate.
      handler: async () => {
        await gate;
        stubbornReturned = true;
      },
    });
    const next = defineJob({
      type: 'after-overrun',
      queue: 'overrun',
      payload: z.object({}),
      handler: async () => {
        returnedWhenNextStarted = stubbornReturned;
      },
    });
    const logs = captureLogs();
    const worker = testWorker(db.pool, [stubborn, next], {
      queues: ['overrun'],
      concurrency: 1,
      pollIntervalMs: 20,
      logger: logs.logger,
    });
    const first = await client.enqueue(stubborn, {});
    const second = await client.enqueue(next, {}, { runAt: new Date(Date.now() + 100) });
    await worker.start();
    try {
      await waitFor(async () => (await jobRow(db.pool, first.id)).status === 'dead', {
        what: 'the overrunning attempt failing at its timeout',
      });
      // Long enough for the loop to claim and start the next job, were the slot free (before:
      // it started while the first handler still ran, two at once at concurrency 1).
      await new Promise((r) => setTimeout(r, 300));
      expect(returnedWhenNextStarted).toBeNull();
      expect((await jobRow(db.pool, second.id)).status).toBe('pending');
      expect(logs.lines.find((l) => l.reason === 'handler_overran')).toMatchObject({
        jobId: first.id,
      });
      release();
      await waitFor(async () => (await jobRow(db.pool, second.id)).status === 'completed');
      expect(returnedWhenNextStarted).toBe(true);
    } finally {
      release();
      await worker.stop();
    }
  });

  it('gives handlers a stable idempotency key across attempts', async () => {
    const keys: string[] = [];
    const keyed = defineJob({
      type: 'keyed',
      payload: z.object({}),
      backoff: fastBackoff,
      handler: async (_p, ctx) => {
        keys.push(ctx.idempotencyKey);
        if (ctx.job.attempt === 1) throw new Error('first try fails');
      },
    });
    const { id } = await client.enqueue(keyed, {});
    const { id: id2 } = await client.enqueue(keyed, {}, { idempotencyKey: 'order-7' });
    const worker = testWorker(db.pool, [keyed]);
    await worker.runOnce();
    await db.pool.query(`UPDATE skiplock.jobs SET run_at = now() WHERE status = 'retryable'`);
    await worker.runOnce();
    expect(keys.filter((k) => k === `job:${id}`)).toHaveLength(2);
    expect(keys.filter((k) => k === 'order-7')).toHaveLength(2);
    expect((await jobRow(db.pool, id2)).status).toBe('completed');
  });

  it('commits a handler write and its completion together with completeWith', async () => {
    await db.pool.query('CREATE TABLE IF NOT EXISTS public.effects (job_id text PRIMARY KEY)');
    const writes = defineJob({
      type: 'writes',
      payload: z.object({}),
      handler: async (_p, ctx) => {
        await ctx.completeWith((tx) =>
          tx.query('INSERT INTO public.effects VALUES ($1)', [ctx.job.id]),
        );
      },
    });
    const { id } = await client.enqueue(writes, {});
    await testWorker(db.pool, [writes]).runOnce();
    expect((await jobRow(db.pool, id)).status).toBe('completed');
    expect(
      (await db.pool.query('SELECT 1 FROM public.effects WHERE job_id = $1', [id])).rowCount,
    ).toBe(1);
  });

  it("ends a completeWith transaction at the job's timeout, cancelling a statement stuck on a lock", async () => {
    await db.pool.query(
      'CREATE TABLE IF NOT EXISTS public.contended (id int PRIMARY KEY, v int NOT NULL)',
    );
    await db.pool.query('INSERT INTO public.contended VALUES (1, 0) ON CONFLICT DO NOTHING');
    const stuck = defineJob({
      type: 'stuck-on-lock',
      payload: z.object({}),
      timeoutMs: 300,
      backoff: { baseMs: 1, maxMs: 5, jitter: 0 },
      handler: async (_p, ctx) => {
        await ctx.completeWith((tx) =>
          tx.query('UPDATE public.contended SET v = v + 1 WHERE id = 1'),
        );
      },
    });
    // Another transaction holds the row: the job's UPDATE waits for it, holding the job's row.
    const blocker = await db.pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query('SELECT 1 FROM public.contended WHERE id = 1 FOR UPDATE');
      const { id } = await client.enqueue(stuck, {});
      // runOnce returns once the attempt is settled: its failure's write needs the job's row,
      // which the completing transaction held until its statement was cancelled.
      await testWorker(db.pool, [stuck]).runOnce();
      const row = await jobRow(db.pool, id);
      expect(row.status).toBe('retryable');
      expect(row.errors[0]).toMatchObject({ reason: 'timeout' });
      // The UPDATE rolled back: the blocker still holds the row, and nothing was written.
      expect((await blocker.query('SELECT v FROM public.contended WHERE id = 1')).rows).toEqual([
        { v: 0 },
      ]);
    } finally {
      await blocker.query('ROLLBACK');
      blocker.release();
    }
  });

  it('gives a context whose members work destructured and which shows only the job when logged', async () => {
    await db.pool.query(
      'CREATE TABLE IF NOT EXISTS public.destructured (job_id text PRIMARY KEY, key text)',
    );
    const seen: {
      keys: string[];
      json: string;
      renewed: boolean;
      aborted: boolean;
      viaProxy: string;
      viaPrototype: string;
    }[] = [];
    const job = defineJob({
      type: 'destructures',
      payload: z.object({}),
      handler: async (_p, ctx) => {
        const { job, signal, logger, idempotencyKey, extendLease, completeWith } = ctx;
        logger.debug('running');
        const renewed = await extendLease(60_000);
        seen.push({
          keys: Object.keys(ctx),
          json: JSON.stringify(ctx),
          renewed,
          aborted: signal.aborted,
          // A wrapper that forwards to the context, or inherits from it, still reaches the run.
          viaProxy: new Proxy(ctx, {}).idempotencyKey,
          viaPrototype: (Object.create(ctx) as typeof ctx).idempotencyKey,
        });
        await completeWith((tx) =>
          tx.query('INSERT INTO public.destructured VALUES ($1, $2)', [job.id, idempotencyKey]),
        );
      },
    });
    const { id } = await client.enqueue(job, {});
    await testWorker(db.pool, [job]).runOnce();
    expect((await jobRow(db.pool, id)).status).toBe('completed');
    const { rows } = await db.pool.query('SELECT key FROM public.destructured WHERE job_id = $1', [
      id,
    ]);
    expect(rows).toEqual([{ key: `job:${id}` }]);
    // The worker's pool, logger and lease bookkeeping stay out of a logged or serialized context.
    expect(seen).toEqual([
      {
        keys: ['job'],
        json: expect.any(String),
        renewed: true,
        aborted: false,
        viaProxy: `job:${id}`,
        viaPrototype: `job:${id}`,
      },
    ]);
    expect(JSON.parse(seen[0]!.json)).toEqual({ job: expect.objectContaining({ id, attempt: 1 }) });
  });

  it('runs onDead in the same transaction as the dead write', async () => {
    await db.pool.query(
      'CREATE TABLE IF NOT EXISTS public.dead_letters (job_id text PRIMARY KEY, reason text)',
    );
    const doomed = defineJob({
      type: 'doomed',
      payload: z.object({}),
      maxAttempts: 1,
      handler: async () => {
        throw new Error('nope');
      },
      onDead: async (tx, info) => {
        await tx.query('INSERT INTO public.dead_letters VALUES ($1, $2)', [info.id, info.reason]);
      },
    });
    const { id } = await client.enqueue(doomed, {});
    await testWorker(db.pool, [doomed]).runOnce();
    expect((await jobRow(db.pool, id)).status).toBe('dead');
    const { rows } = await db.pool.query(
      'SELECT reason FROM public.dead_letters WHERE job_id = $1',
      [id],
    );
    expect(rows).toEqual([{ reason: 'max_attempts' }]);
  });

  it('stop() stops claiming and waits for in-flight jobs to finish', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let started = 0;
    const gated = defineJob({
      type: 'gated',
      payload: z.object({}),
      handler: async () => {
        started += 1;
        await gate;
      },
    });
    await client.enqueueMany(gated, [{ payload: {} }, { payload: {} }, { payload: {} }]);
    const logs = captureLogs();
    const worker = testWorker(db.pool, [gated], {
      concurrency: 2,
      pollIntervalMs: 20,
      logger: logs.logger,
    });
    await worker.start();
    await waitFor(() => started === 2, { what: 'two handlers running' });
    // Options that are no duration are refused by name and leave the worker running. Before:
    // Infinity fired Node's timer after 1 ms and aborted both handlers; NaN cut every wait.
    for (const bad of [
      { timeoutMs: Number.POSITIVE_INFINITY },
      { timeoutMs: 3_000_000_000 },
      { graceMs: Number.NaN },
      { graceMs: -1 },
      { timeout: 5 } as never,
    ]) {
      await expect(worker.stop(bad)).rejects.toThrow(
        /invalid stop options: (timeoutMs|graceMs|\(root\))/,
      );
    }
    const stopped = worker.stop({ timeoutMs: 10_000 });
    release();
    await stopped;
    const { rows } = await db.pool.query<{ status: string; n: number }>(
      `SELECT status, count(*)::int AS n FROM skiplock.jobs WHERE job_type = 'gated' GROUP BY status ORDER BY status::text`,
    );
    expect(rows).toEqual([
      { status: 'completed', n: 2 },
      { status: 'pending', n: 1 },
    ]);
    expect(started).toBe(2);
    // The stop has a reason of its own; `shutdown` is only for a job handed back, and both jobs
    // finished. Before, the stop line itself was `shutdown`, so an alert on it fired every deploy.
    const stopping = logs.lines.filter((l) => l['reason'] === 'worker_stopping');
    expect(stopping).toEqual([expect.objectContaining({ msg: 'worker stopping', inFlight: 2 })]);
    expect(logs.reasons()).not.toContain('shutdown');
  });

  it('stop() past its deadline aborts handlers and releases jobs without spending an attempt', async () => {
    let sawShutdown = false;
    let started = false;
    const endless = defineJob({
      type: 'endless',
      payload: z.object({}),
      handler: (_p, ctx) =>
        new Promise<void>((_resolve, reject) => {
          started = true;
          ctx.signal.addEventListener('abort', () => {
            sawShutdown = (ctx.signal.reason as Error).name === 'ShutdownError';
            reject(ctx.signal.reason as Error);
          });
        }),
    });
    const { id } = await client.enqueue(endless, {});
    const logs = captureLogs();
    const worker = testWorker(db.pool, [endless], { pollIntervalMs: 20, logger: logs.logger });
    await worker.start();
    // The handler running, not the row reading `processing`: the claim's commit is visible before
    // its answer reaches the worker, and a stop() in between hands the job back unstarted.
    await waitFor(() => started);
    await worker.stop({ timeoutMs: 50 });
    const row = await jobRow(db.pool, id);
    expect(sawShutdown).toBe(true);
    expect(row.status).toBe('pending');
    expect(row.attempts).toBe(0);
    expect(row.locked_by).toBeNull();
    // One `shutdown` line, the handed-back job's; the stop's own line is `worker_stopping`.
    expect(logs.lines.filter((l) => l['reason'] === 'shutdown')).toEqual([
      expect.objectContaining({ jobId: id, msg: 'job released on shutdown' }),
    ]);
    expect(logs.reasons().filter((r) => r === 'worker_stopping')).toHaveLength(1);
  });

  it.each([
    ['on a pool of its own', false],
    ['on the LISTEN connection', true],
  ])(
    'runOnce() whose claim is in flight when stop() begins: stop() hands the jobs back before it returns (claim %s)',
    async (_where, listen) => {
      let ran = 0;
      const queue = `run-once-stopped-${String(listen)}`;
      const job = defineJob({
        type: queue,
        queue,
        payload: z.object({}),
        handler: () => void (ran += 1),
      });
      const { id } = await client.enqueue(job, {});
      // The worker owns its pool, so stop() ends it: a hand-back after stop() returned would
      // find it closed (and the LISTEN connection, where the claim ran, closed under it).
      const worker = createWorker({
        connectionString: db.url,
        jobs: [job],
        logger: quiet,
        sweeper: false,
        retention: false,
        listen,
      });
      // A SHARE lock on the table holds the claim (its UPDATE waits for it) until the test lets
      // it go, so stop() surely begins while the claim is in flight.
      const blocker = await db.pool.connect();
      let once: Promise<number> | null = null;
      try {
        await blocker.query('BEGIN');
        await blocker.query('LOCK TABLE skiplock.jobs IN SHARE MODE');
        once = worker.runOnce();
        await claimWaitingForLock();
      } finally {
        const stopped = worker.stop();
        await blocker.query('COMMIT');
        blocker.release();
        await stopped;
      }
      // stop() has returned: the job is back, unrun and with no attempt spent.
      const row = await jobRow(db.pool, id);
      expect(row.status).toBe('pending');
      expect(row.locked_by).toBeNull();
      expect(row.attempts).toBe(0);
      expect(await once).toBe(0);
      expect(ran).toBe(0);
    },
  );

  it.each([
    ['runOnce()', 'the test', 'once'],
    ["the started worker's loop", 'the test', 'loop'],
    ['runOnce()', 'its own', 'once'],
    ["the started worker's loop", 'its own', 'loop'],
  ])(
    'a claim that answers after stop() gave up waiting for it hands its jobs back (%s, on %s pool)',
    async (_what, whose, how) => {
      let ran = 0;
      const queue = `late-claim-${how}-${whose === 'its own' ? 'owned' : 'given'}`;
      const job = defineJob({
        type: queue,
        queue,
        payload: z.object({}),
        handler: () => void (ran += 1),
      });
      const { id } = await client.enqueue(job, {});
      // The row's version as enqueued: until the late claim commits, a read still sees this
      // pending row, so the wait below is for a pending row written after it (CI saw the wait
      // pass on the unclaimed row and the claim commit after it).
      const enqueued = await rowVersion(id);
      // The test's pool outlives stop(); a pool of the worker's own must too, until the late
      // claim's hand-back (found in review: it was ended, and the hand-back failed).
      const pool = db.newPool(4);
      pool.on('error', () => {});
      const worker =
        whose === 'the test'
          ? testWorker(pool, [job], { queues: [queue], pollIntervalMs: 20 })
          : createWorker({
              connectionString: db.url,
              jobs: [job],
              logger: quiet,
              sweeper: false,
              retention: false,
              // Claims on the pool: a claim on the LISTEN connection is cut short as stop()
              // closes it, and never commits.
              listen: false,
              queues: [queue],
              pollIntervalMs: 20,
            });
      const blocker = await db.pool.connect();
      let once: Promise<number> | null = null;
      try {
        await blocker.query('BEGIN');
        await blocker.query('LOCK TABLE skiplock.jobs IN SHARE MODE');
        if (how === 'once') once = worker.runOnce();
        else await worker.start();
        await claimWaitingForLock();
        // The grace runs out while the claim waits: stop() returns, leaving it.
        await worker.stop({ graceMs: 200 });
      } finally {
        await blocker.query('COMMIT');
        blocker.release();
      }
      // The claim commits now, after stop() returned. Before (found by an audit): its job stayed
      // processing, leased to the stopped worker, and runOnce() never returned.
      if (once) expect(await once).toBe(0);
      // Status and version in one read: read apart, the claim could commit between them, and a
      // pending status read before it passed with the claim's version (seen under load).
      await waitFor(
        async () => {
          const { rows } = await db.pool.query<{ status: string; v: string }>(
            'SELECT status::text, xmin::text AS v FROM skiplock.jobs WHERE id = $1',
            [id],
          );
          return rows[0]!.status === 'pending' && rows[0]!.v !== enqueued;
        },
        { what: 'the late claim to be handed back' },
      );
      expect(await jobRow(db.pool, id)).toMatchObject({ locked_by: null, attempts: 0 });
      expect(ran).toBe(0);
      await pool.end();
    },
  );

  it('logs stop_timeout, naming the wait, when a claim outlives the grace with no job running', async () => {
    const job = defineJob({
      type: 'stop-grace',
      queue: 'stop-grace',
      payload: z.object({}),
      handler: () => {},
    });
    const logs = captureLogs();
    const worker = testWorker(db.newPool(2), [job], { logger: logs.logger });
    // The loop's claim waits behind a SHARE lock for as long as the test holds it: to the worker,
    // a database that does not answer while no job runs.
    const blocker = await db.pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query('LOCK TABLE skiplock.jobs IN SHARE MODE');
      await worker.start();
      await claimWaitingForLock();
      await worker.stop({ graceMs: 200 });
    } finally {
      await blocker.query('COMMIT');
      blocker.release();
    }
    const line = logs.lines.find((l) => l['reason'] === 'stop_timeout');
    expect(line?.['cut']).toEqual(['claim']);
  });
});
