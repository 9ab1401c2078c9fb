import { enqueueHandedOff, type HandOffResult } from '@skiplock/queue/engine';
import { sql } from 'drizzle-orm';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createClient,
  createSweeper,
  defineJob,
  type DeadJobInfo,
  type Worker,
} from '../src/index.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { quiet, testWorker } from './fixtures.js';
import { metricValue } from '../../../test/support/metrics.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

/**
 * A job type whose job `n` enqueues job `n + 1` (until `last`) in its completing transaction, as
 * a saga step enqueues the next step; every hand-off decision is recorded by `n`.
 */
function chain(name: string, last: number, fail?: (n: number) => boolean) {
  const decisions = new Map<number, HandOffResult>();
  const ran: number[] = [];
  const def = defineJob({
    type: name,
    queue: name,
    payload: z.object({ n: z.number() }),
    backoff: { baseMs: 1, maxMs: 5, jitter: 0 },
    handler: async ({ n }, ctx) => {
      ran.push(n);
      await ctx.completeWith(async (tx) => {
        if (n === last) return;
        const result = await enqueueHandedOff(
          client,
          tx,
          ctx,
          def,
          { n: n + 1 },
          {
            idempotencyKey: `${name}:${n + 1}`,
          },
        );
        decisions.set(n + 1, result);
        if (fail?.(n)) throw new Error(`job ${n} fails after its successor's insert`);
      });
    },
  });
  return { def, decisions, ran };
}

/** A started worker that would find new work only after a minute without its hand-offs. */
async function slowPolling(jobs: Parameters<typeof testWorker>[1], maxHandOffs?: number) {
  const worker = testWorker(db.pool, jobs, {
    pollIntervalMs: 60_000,
    listen: true,
    concurrency: 2,
    ...(maxHandOffs === undefined ? {} : { maxHandOffs }),
  });
  await worker.start();
  return worker;
}

async function rows(queue: string) {
  const { rows } = await db.pool.query<{
    n: number;
    status: string;
    attempts: number;
    locked_by: string | null;
  }>(
    `SELECT (payload->>'n')::int AS n, status::text, attempts, locked_by
     FROM skiplock.jobs WHERE queue = $1 ORDER BY id`,
    [queue],
  );
  return rows;
}

async function countDone(queue: string) {
  return (await rows(queue)).filter((r) => r.status === 'completed').length;
}

async function stop(worker: Worker) {
  await worker.stop({ timeoutMs: 5_000 });
}

describe('hand-off of a successor job to the worker that finished its predecessor', () => {
  it('runs a chain on one worker with no claim or poll between its jobs', async () => {
    const { def, decisions, ran } = chain('handoff-chain', 6);
    const worker = await slowPolling([def]);
    const claimsBefore = await metricValue(worker.metrics, 'skiplock_claim_batch_size_count');
    const listener = await db.pool.connect();
    const notified: string[] = [];
    listener.on('notification', (m) => notified.push(m.payload ?? ''));
    await listener.query('LISTEN skiplock_jobs');
    await client.enqueue(def, { n: 0 });
    // LISTEN wakes the worker for job 0; nothing would wake it for the others for a minute.
    await waitFor(
      async () =>
        (await rows('handoff-chain')).every((r) => r.status === 'completed') && ran.length === 7,
      { timeoutMs: 10_000 },
    );
    await stop(worker);
    await listener.query('UNLISTEN skiplock_jobs');
    listener.release();
    expect(ran).toEqual([0, 1, 2, 3, 4, 5, 6]);
    // One wake-up, for the enqueued job 0; jobs inserted leased send none.
    expect(notified).toEqual(['handoff-chain']);
    expect([...decisions.values()].every((d) => d.handedOff && d.inserted)).toBe(true);
    expect(await metricValue(worker.metrics, 'skiplock_jobs_handed_off_total')).toBe(6);
    // One claim took job 0 (wake-ups may add empty ones); none took the six handed-off jobs.
    expect(await metricValue(worker.metrics, 'skiplock_claim_batch_size_sum')).toBe(1);
    expect(
      (await metricValue(worker.metrics, 'skiplock_claim_batch_size_count')) - claimsBefore,
    ).toBeLessThan(7);
    for (const row of await rows('handoff-chain')) {
      expect(row).toMatchObject({ status: 'completed', attempts: 1, locked_by: worker.id });
    }
  });

  it('keeps a worker for at most maxHandOffs jobs in a row, then queues the next for anyone', async () => {
    const { def, decisions, ran } = chain('handoff-fair', 9);
    const worker = testWorker(db.pool, [def], {
      maxHandOffs: 3,
      concurrency: 2,
      pollIntervalMs: 20,
    });
    await worker.start();
    await client.enqueue(def, { n: 0 });
    await waitFor(() => ran.length === 10, { timeoutMs: 10_000 });
    await stop(worker);
    // Depth 0 (claimed) hands off 1, 2, 3; job 3 is at the limit, so 4 is queued and claimed.
    const handed = [...Array(9).keys()].map((i) => decisions.get(i + 1)!.handedOff);
    expect(handed).toEqual([true, true, true, false, true, true, true, false, true]);
    expect(await metricValue(worker.metrics, 'skiplock_jobs_handed_off_total')).toBe(7);
  });

  it('inserts nothing and starts nothing when the completing transaction rolls back', async () => {
    const { def, decisions } = chain('handoff-rollback', 1, (n) => n === 0);
    const worker = await slowPolling([def]);
    const { id } = await client.enqueue(def, { n: 0 }, { maxAttempts: 1 });
    await waitFor(async () => (await client.getJob(id))?.status === 'dead', { timeoutMs: 10_000 });
    await stop(worker);
    expect(decisions.get(1)?.handedOff).toBe(true);
    expect((await rows('handoff-rollback')).map((r) => r.n)).toEqual([0]);
    expect(await metricValue(worker.metrics, 'skiplock_jobs_handed_off_total')).toBe(0);
  });

  it('enqueues like any job when the key is taken, from runOnce, or with hand-offs off', async () => {
    const taken = chain('handoff-taken', 1);
    await client.enqueue(taken.def, { n: 1 }, { idempotencyKey: 'handoff-taken:1' });
    const existing = (await rows('handoff-taken'))[0]!;
    const once = chain('handoff-once', 1);
    const off = chain('handoff-off', 1);
    const worker = await slowPolling([taken.def]);
    await client.enqueue(taken.def, { n: 0 });
    await waitFor(() => taken.decisions.size === 1, { timeoutMs: 10_000 });
    await stop(worker);
    expect(taken.decisions.get(1)).toMatchObject({ inserted: false, handedOff: false });
    expect(existing.n).toBe(1);

    await client.enqueue(once.def, { n: 0 });
    await testWorker(db.pool, [once.def]).runOnce();
    expect(once.decisions.get(1)).toMatchObject({ inserted: true, handedOff: false });

    const noHandOff = await slowPolling([off.def], 0);
    await client.enqueue(off.def, { n: 0 });
    await waitFor(() => off.ran.length === 2, { timeoutMs: 10_000 });
    await stop(noHandOff);
    expect(off.decisions.get(1)).toMatchObject({ inserted: true, handedOff: false });
  });

  it("hands a dead job's successor, enqueued by its onDead hook, to the worker that ran it", async () => {
    const ran: string[] = [];
    const decisions: HandOffResult[] = [];
    const after = defineJob({
      type: 'handoff-undo',
      queue: 'handoff-dead',
      payload: z.object({ of: z.string() }),
      handler: ({ of }) => {
        ran.push(`undo ${of}`);
      },
    });
    const failing = defineJob({
      type: 'handoff-dying',
      queue: 'handoff-dead',
      payload: z.object({ name: z.string() }),
      maxAttempts: 1,
      handler: ({ name }) => {
        ran.push(name);
        throw new Error(`${name} fails`);
      },
      onDead: async (tx, info) => {
        decisions.push(await enqueueHandedOff(client, tx, info, after, { of: info.id }));
      },
    });
    const worker = await slowPolling([failing, after]);
    const { id } = await client.enqueue(failing, { name: 'first' });
    await waitFor(() => ran.length === 2, { timeoutMs: 10_000 });
    await stop(worker);
    expect(ran).toEqual(['first', `undo ${id}`]);
    expect(decisions).toEqual([expect.objectContaining({ inserted: true, handedOff: true })]);
    // One claim took the failing job; the successor went in leased and ran without one.
    expect(await metricValue(worker.metrics, 'skiplock_claim_batch_size_sum')).toBe(1);
    expect(await metricValue(worker.metrics, 'skiplock_jobs_handed_off_total')).toBe(1);
    const states = (await rows('handoff-dead')).map((r) => [r.status, r.locked_by]);
    expect(states).toEqual([
      ['dead', worker.id],
      ['completed', worker.id],
    ]);

    // The same hook with no worker behind it (a sweeper's dead job has no slot): enqueued as usual.
    const plain = await db.pool.connect();
    try {
      await plain.query('BEGIN');
      const info: DeadJobInfo = {
        id,
        type: failing.type,
        queue: failing.queue,
        attempt: 1,
        maxAttempts: 1,
        priority: 0,
        idempotencyKey: null,
        reason: 'max_attempts',
        error: 'lease expired',
      };
      const result = await enqueueHandedOff(client, plain, info, after, { of: 'swept' });
      await plain.query('COMMIT');
      expect(result).toMatchObject({ inserted: true, handedOff: false });
    } finally {
      plain.release();
    }
  });
});

describe('statements run with a hand-off insert (`then`)', () => {
  it('runs them in the insert statement with the new id, and changes nothing when the key was taken', async () => {
    await db.pool.query('CREATE TABLE IF NOT EXISTS handoff_then_marks (job_id bigint NOT NULL)');
    const results: HandOffResult[] = [];
    const def = defineJob({
      type: 'handoff-then',
      queue: 'handoff-then',
      payload: z.object({ n: z.number() }),
      handler: async ({ n }, ctx) => {
        await ctx.completeWith(async (tx) => {
          if (n > 0) return;
          // Twice the same key: the second insert finds it taken.
          for (let i = 0; i < 2; i++) {
            const result = await enqueueHandedOff(
              client,
              tx,
              ctx,
              def,
              { n: 1 },
              {
                idempotencyKey: 'handoff-then:1',
                then: (jobId) => [
                  sql`INSERT INTO handoff_then_marks (job_id)
                      SELECT ${jobId} WHERE ${jobId} IS NOT NULL`,
                ],
              },
            );
            results.push(result);
          }
        });
      },
    });
    const worker = await slowPolling([def]);
    await client.enqueue(def, { n: 0 });
    await waitFor(
      async () =>
        (await rows('handoff-then')).every((r) => r.status === 'completed') &&
        (await rows('handoff-then')).length === 2,
      {
        what: 'both jobs to complete',
      },
    );
    await stop(worker);
    const marks = await db.pool.query<{ job_id: string }>(
      'SELECT job_id::text FROM handoff_then_marks',
    );
    expect(results.map((r) => [r.inserted, r.handedOff, r.followed])).toEqual([
      [true, true, true],
      [false, false, false],
    ]);
    expect(results[1]!.id).toBe(results[0]!.id);
    // Written once, with the id of the job the first insert made.
    expect(marks.rows).toEqual([{ job_id: results[0]!.id }]);
  });
});

describe("a dead job's hand-off when its worker has no free slot", () => {
  it('enqueues the successor for any worker instead of leasing it to its own full worker', async () => {
    const at: { undo?: number; longEnd?: number } = {};
    const decisions: HandOffResult[] = [];
    const undo = defineJob({
      type: 'dead-full-undo',
      queue: 'dead-full-undo',
      payload: z.object({}),
      handler: () => {
        at.undo = performance.now();
      },
    });
    // One type, so that one bulk insert (one NOTIFY, one claim) brings the failing job and the
    // long one together; the failing one has the higher priority and runs first.
    const work = defineJob({
      type: 'dead-full-work',
      queue: 'dead-full',
      payload: z.object({ kind: z.enum(['warm', 'fail', 'long']) }),
      maxAttempts: 1,
      handler: async ({ kind }) => {
        if (kind === 'fail') throw new Error('fails for good');
        if (kind === 'long') {
          await new Promise((resolve) => setTimeout(resolve, 1_500));
          at.longEnd = performance.now();
        }
      },
      onDead: async (tx, info) => {
        decisions.push(await enqueueHandedOff(client, tx, info, undo, {}));
      },
    });
    const idle = testWorker(db.pool, [undo], { listen: true, concurrency: 4 });
    await idle.start();
    // One slot, and a prefetch window long enough to buffer the long job beside the failing one
    // once a handler's speed is known (the warm-up job): the long job takes the slot the failing
    // one frees, before the failing one's dead hook runs.
    const busy = testWorker(db.pool, [work, undo], {
      pollIntervalMs: 60_000,
      listen: true,
      concurrency: 1,
      prefetchWindowMs: 60_000,
    });
    await busy.start();
    const [warm] = await client.enqueueMany(work, [{ payload: { kind: 'warm' } }]);
    await waitFor(async () => (await client.getJob(warm!.id))?.status === 'completed', {
      what: 'the warm-up job to complete',
    });
    await client.enqueueMany(work, [
      { payload: { kind: 'fail' }, priority: 10 },
      { payload: { kind: 'long' } },
    ]);
    await waitFor(() => at.undo !== undefined && at.longEnd !== undefined, {
      what: 'the undo job and the long job to run',
    });
    await stop(busy);
    await stop(idle);
    // Inserted pending, for whichever worker claims it first (before the change: leased to the
    // busy worker, at the front of its buffer behind the long job). Which one claims it is the
    // queue's ordinary race: with this test's long prefetch window the busy one may buffer it.
    expect(decisions.map((d) => [d.inserted, d.handedOff])).toEqual([[true, false]]);
    const { rows: ran } = await db.pool.query<{ status: string }>(
      `SELECT status::text FROM skiplock.jobs WHERE job_type = 'dead-full-undo'`,
    );
    expect(ran).toEqual([{ status: 'completed' }]);
  });
});

describe('the lease of a handed-off job', () => {
  it('renews a successor whose lease its slow transaction used up before it starts', async () => {
    const sweeps: string[][] = [];
    const sweeper = createSweeper({
      pool: db.pool,
      logger: quiet,
      backoff: { baseMs: 0, maxMs: 0 },
    });
    const runs: number[] = [];
    const next = defineJob({
      type: 'handoff-late-next',
      queue: 'handoff-late',
      payload: z.object({}),
      leaseMs: 2_000,
      handler: async (_, ctx) => {
        runs.push(ctx.job.attempt);
        // The sweeper at the moment the job starts takes back every lease that ran out.
        sweeps.push((await sweeper.runOnce()).jobIds);
      },
    });
    const decisions: HandOffResult[] = [];
    const first = defineJob({
      type: 'handoff-late-first',
      queue: 'handoff-late',
      payload: z.object({}),
      handler: async (_, ctx) => {
        await ctx.completeWith(async (tx) => {
          decisions.push(await enqueueHandedOff(client, tx, ctx, next, {}));
          // Slow work after the hand-off: longer than the successor's whole lease.
          await new Promise((resolve) => setTimeout(resolve, 2_300));
        });
      },
    });
    // No heartbeat falls between the successor's start and its sweep (one every 1.9 s).
    const worker = testWorker(db.pool, [first, next], {
      concurrency: 2,
      pollIntervalMs: 20,
      heartbeatIntervalMs: 1_900,
    });
    await worker.start();
    await client.enqueue(first, {});
    await waitFor(async () => (await countDone('handoff-late')) === 2, { timeoutMs: 10_000 });
    await stop(worker);
    expect(decisions).toMatchObject([{ handedOff: true }]);
    // Before: its lease had run out as it started, the sweep took it back (attempt 2 ran).
    expect(runs).toEqual([1]);
    expect(sweeps).toEqual([[]]);
    for (const row of await rows('handoff-late')) {
      expect(row).toMatchObject({ status: 'completed', attempts: 1 });
    }
  });

  it("stops a successor whose stop was heard between its transaction's commit and its adoption", async () => {
    let releaseNext!: () => void;
    const gate = new Promise<void>((r) => (releaseNext = r));
    const started: string[] = [];
    const signals: AbortSignal[] = [];
    const decisions: HandOffResult[] = [];
    const def = defineJob({
      type: 'handoff-stopped-next',
      queue: 'handoff-stopped-next',
      payload: z.object({ n: z.number() }),
      leaseMs: 30_000,
      backoff: { baseMs: 1, maxMs: 5, jitter: 0 },
      handler: async ({ n }, ctx) => {
        started.push(ctx.job.id);
        signals.push(ctx.signal);
        if (n === 1) {
          await gate;
          return;
        }
        await ctx.completeWith(async (tx) => {
          decisions.push(await enqueueHandedOff(client, tx, ctx, def, { n: 1 }));
        });
      },
    });
    // The answer to the first COMMIT on this pool (job 0's completing transaction) waits for the
    // test's word after the server has committed: the successor is leased, not yet adopted.
    const pool = db.newPool(4);
    let committed!: () => void;
    const commit = new Promise<void>((resolve) => (committed = resolve));
    let open!: () => void;
    const hold = new Promise<void>((resolve) => (open = resolve));
    let armed = true;
    const sent: string[] = [];
    const wrapped = new WeakSet<object>();
    const wrap = (c: pg.PoolClient) => {
      if (wrapped.has(c)) return;
      wrapped.add(c);
      const query = c.query.bind(c) as (...args: unknown[]) => Promise<unknown>;
      (c as unknown as { query: typeof query }).query = async (...args: unknown[]) => {
        const first = args[0];
        sent.push(typeof first === 'string' ? first : ((first as { text?: string }).text ?? ''));
        const answer = await query(...args);
        if (armed && args[0] === 'COMMIT') {
          armed = false;
          committed();
          await hold;
        }
        return answer;
      };
    };
    const connect = pool.connect.bind(pool) as (...args: unknown[]) => unknown;
    (pool as unknown as { connect: typeof connect }).connect = (...args: unknown[]) => {
      const cb = args[0] as ((e: unknown, c?: pg.PoolClient, done?: unknown) => void) | undefined;
      if (typeof cb === 'function') {
        return connect((e: unknown, c?: pg.PoolClient, done?: unknown) => {
          if (c) wrap(c);
          cb(e, c, done);
        });
      }
      return (connect() as Promise<pg.PoolClient>).then((c) => {
        wrap(c);
        return c;
      });
    };
    const worker = testWorker(pool, [def], { listen: true, concurrency: 2 });
    const lost: string[] = [];
    worker.on('job:lock_lost', (e) => lost.push(e.jobId));
    try {
      await worker.start();
      await client.enqueue(def, { n: 0 });
      await commit;
      expect(decisions).toMatchObject([{ handedOff: true }]);
      const next = decisions[0]!.id;
      // Committed and leased to the worker, which has not adopted it yet.
      const from = sent.length;
      expect(await client.cancelJob(next, { running: true })).toBe(true);
      // The notification reaches the worker, whose renewal then has nothing of it to renew.
      await waitFor(() => sent.slice(from).some((t) => t.includes('WITH lockable AS')) || null, {
        what: 'the renewal the stop set off',
      });
      open();
      // A 30 s lease: without a renewal after the adoption, its own would come 10 s later.
      await waitFor(() => lost.includes(next), {
        timeoutMs: 4_000,
        what: 'the successor stopped once adopted',
      });
      const at = started.indexOf(next);
      // Aborted before its handler started, or at once after (the renewal races the start).
      expect(at === -1 || signals[at]!.aborted).toBe(true);
      const { rows } = await db.pool.query<{ status: string }>(
        'SELECT status::text FROM skiplock.jobs WHERE id = $1',
        [next],
      );
      expect(rows[0]?.status).toBe('cancelled');
    } finally {
      open();
      releaseNext();
      await stop(worker);
    }
  });

  it('hands back, before stop() returns, a successor committed while stop() drained its job', async () => {
    const logs = captureLogs();
    let openGate!: () => void;
    const gate = new Promise<void>((resolve) => (openGate = resolve));
    const decisions: HandOffResult[] = [];
    const next = defineJob({
      type: 'handoff-stop-next',
      queue: 'handoff-stop',
      payload: z.object({}),
      handler: () => {},
    });
    const first = defineJob({
      type: 'handoff-stop-first',
      queue: 'handoff-stop',
      payload: z.object({}),
      handler: async (_, ctx) => {
        await ctx.completeWith(async (tx) => {
          decisions.push(await enqueueHandedOff(client, tx, ctx, next, {}));
          await gate;
        });
      },
    });
    const worker = testWorker(db.pool, [first, next], {
      logger: logs.logger,
      concurrency: 2,
      pollIntervalMs: 20,
      heartbeatIntervalMs: 10_000,
    });
    await worker.start();
    await client.enqueue(first, {});
    await waitFor(() => decisions.length === 1);
    // stop() begins while the job's transaction is open, and gets past its early waits.
    const stopping = worker.stop({ timeoutMs: 5_000, graceMs: 5_000 });
    await waitFor(() => logs.reasons().includes('worker_stopping'));
    // A table lock queued behind that transaction holds the successor's release back until the
    // test lets it go, so stop() returning before the release shows.
    const locker = await db.pool.connect();
    await locker.query('BEGIN');
    const locked = locker.query('LOCK TABLE skiplock.jobs IN EXCLUSIVE MODE');
    await waitFor(async () => {
      const { rows } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND mode = 'ExclusiveLock'
           AND relation = 'skiplock.jobs'::regclass
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
      );
      return rows[0]!.n === 1;
    });
    openGate();
    await locked;
    setTimeout(() => void locker.query('COMMIT').finally(() => locker.release()), 500);
    await stopping;
    expect(decisions).toMatchObject([{ handedOff: true }]);
    // Before: stop() returned with the release still waiting, the successor still processing.
    expect(await rows('handoff-stop')).toEqual([
      { n: null, status: 'completed', attempts: 1, locked_by: worker.id },
      { n: null, status: 'pending', attempts: 0, locked_by: null },
    ]);
  });
});
