import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createAdmitter, createClient, defineJob, type WorkerOptions } from '../src/index.js';
import { ADMIT_CHANNEL, NOTIFY_CHANNEL } from '../src/listener.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { quiet, testWorker } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

const ping = defineJob({
  type: 'ping',
  queue: 'wake',
  payload: z.object({ n: z.number() }),
  handler: async () => {},
});

/** Queues woken (`received`) and concurrency keys to admit (`admits`), as they arrive. */
async function listen(): Promise<{
  received: string[];
  admits: string[];
  close: () => Promise<void>;
}> {
  const conn = new pg.Client({ connectionString: db.url });
  await conn.connect();
  const received: string[] = [];
  const admits: string[] = [];
  conn.on('notification', (m) =>
    (m.channel === ADMIT_CHANNEL ? admits : received).push(m.payload ?? ''),
  );
  await conn.query(`LISTEN ${NOTIFY_CHANNEL}`);
  await conn.query(`LISTEN ${ADMIT_CHANNEL}`);
  return { received, admits, close: () => conn.end() };
}

/** A marker notification proves every earlier notification has been delivered. */
async function flush(l: { received: string[] }) {
  await db.pool.query(`SELECT pg_notify($1, 'marker')`, [NOTIFY_CHANNEL]);
  await waitFor(() => l.received.includes('marker'));
  l.received.splice(l.received.indexOf('marker'), 1);
}

describe('LISTEN/NOTIFY wake-ups', () => {
  it('sends one notification per statement and queue, none for jobs scheduled in the future', async () => {
    const l = await listen();
    try {
      await client.enqueueMany(
        ping,
        Array.from({ length: 200 }, (_, n) => ({ payload: { n } })),
      );
      await flush(l);
      expect(l.received).toEqual(['wake']);
      l.received.length = 0;

      await client.enqueueMany(ping, [
        { payload: { n: 1 }, queue: 'a' },
        { payload: { n: 2 }, queue: 'b' },
        { payload: { n: 3 }, queue: 'a' },
      ]);
      await flush(l);
      expect(l.received.sort()).toEqual(['a', 'b']);
      l.received.length = 0;

      await client.enqueueMany(ping, [{ payload: { n: 4 }, delayMs: 60_000 }]);
      await client.enqueue(ping, { n: 5 }, { delayMs: 60_000 });
      await flush(l);
      expect(l.received).toEqual([]);
    } finally {
      await l.close();
    }
  });

  it('each way of inserting due work wakes its queue or its key; a repeat or a later job does not', async () => {
    const l = await listen();
    const woken = async () => {
      await flush(l);
      const queues = [...l.received].sort();
      l.received.length = 0;
      return queues;
    };
    const admits = () => {
      const keys = [...l.admits].sort();
      l.admits.length = 0;
      return keys;
    };
    /** `count` jobs of one bulk, each with a concurrency key of its own: `<prefix><i>`. */
    const keyedBulk = (prefix: string, count: number) =>
      client.enqueueMany(
        ping,
        Array.from({ length: count }, (_, i) => ({
          payload: { n: i },
          concurrencyKey: `${prefix}${i}`,
        })),
      );
    try {
      await client.enqueue(ping, { n: 1 });
      expect(await woken()).toEqual(['wake']);
      await client.enqueue(ping, { n: 2 }, { idempotencyKey: 'once' });
      expect(await woken()).toEqual(['wake']);
      // The key is taken: nothing inserted, nothing to wake for.
      await client.enqueue(ping, { n: 3 }, { idempotencyKey: 'once' });
      expect(await woken()).toEqual([]);
      // A bulk with keys: the new ones wake their queues, the repeat and the later job do not.
      await client.enqueueMany(ping, [
        { payload: { n: 4 }, queue: 'c', idempotencyKey: 'k' },
        { payload: { n: 5 }, queue: 'd', idempotencyKey: 'once' },
        { payload: { n: 6 }, idempotencyKey: 'once' },
        { payload: { n: 7 }, queue: 'e', delayMs: 60_000 },
      ]);
      expect(await woken()).toEqual(['c', 'd']);
      // Singletons: a later job, then a replace that makes it due, which wakes its queue.
      await client.enqueue(ping, { n: 8 }, { singletonKey: 's', delayMs: 60_000 });
      expect(await woken()).toEqual([]);
      await client.enqueue(ping, { n: 9 }, { singletonKey: 's', singletonMode: 'replace' });
      expect(await woken()).toEqual(['wake']);
      await client.enqueue(ping, { n: 10 }, { singletonKey: 's' }); // kept: the queued one stays
      expect(await woken()).toEqual([]);
      await client.enqueue(ping, { n: 11 }, { singletonKey: 't' });
      expect(await woken()).toEqual(['wake']);
      // A replace that moves the queued job later has nothing to wake for.
      await client.enqueue(
        ping,
        { n: 12 },
        { singletonKey: 't', singletonMode: 'replace', delayMs: 60_000 },
      );
      expect(await woken()).toEqual([]);
      expect(admits()).toEqual([]);
      // Waiting for a concurrency slot: its key goes to the admitters, not its queue to workers.
      await client.enqueue(ping, { n: 12 }, { concurrencyKey: 'slot' });
      expect(await woken()).toEqual([]);
      expect(admits()).toEqual(['slot']);
      await client.enqueue(ping, { n: 13 }, { concurrencyKey: 'later', delayMs: 60_000 });
      await client.enqueueMany(ping, [
        { payload: { n: 14 }, concurrencyKey: 'x' },
        { payload: { n: 15 }, concurrencyKey: 'y', idempotencyKey: 'y1' },
        { payload: { n: 16 } },
      ]);
      expect(await woken()).toEqual(['wake']);
      expect(admits()).toEqual(['x', 'y']);
      // 16 keys in one statement: each by name; past 16: one "every key" notification.
      await keyedBulk('m', 16);
      await flush(l);
      expect(admits()).toEqual(Array.from({ length: 16 }, (_, i) => `m${i}`).sort());
      await keyedBulk('k', 17);
      await flush(l);
      expect(admits()).toEqual(['*']);
      // A keyed singleton scheduled later, then replaced to be due: its key is woken then.
      const later = { singletonKey: 'w', concurrencyKey: 'wk' };
      await client.enqueue(ping, { n: 17 }, { ...later, delayMs: 60_000 });
      await client.enqueue(ping, { n: 18 }, { ...later, singletonMode: 'replace' });
      expect(await woken()).toEqual([]);
      expect(admits()).toEqual(['wk']);
      // In a transaction: at its commit, and only if it commits.
      const tx = await db.pool.connect();
      try {
        await tx.query('BEGIN');
        await client.enqueue(ping, { n: 33 }, { queue: 'rolled-back', tx });
        await tx.query('ROLLBACK');
        await tx.query('BEGIN');
        await client.enqueue(ping, { n: 14 }, { queue: 'committed', tx });
        await client.enqueue(ping, { n: 15 }, { queue: 'committed', tx });
        await tx.query('COMMIT');
      } finally {
        tx.release();
      }
      expect(await woken()).toEqual(['committed']);
    } finally {
      await l.close();
    }
  });

  it('leaves no insert trigger or its function behind on a new database', async () => {
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT (SELECT count(*) FROM pg_trigger
                WHERE tgrelid = 'skiplock.jobs'::regclass AND NOT tgisinternal)
            + (SELECT count(*) FROM pg_proc
                WHERE proname = 'notify_jobs_inserted') AS n`,
    );
    expect(Number(rows[0]!.n)).toBe(0);
  });

  it('a keyed job just enqueued wakes a listening admitter, which runs it without its pass', async () => {
    const started: string[] = [];
    const keyed = defineJob({
      type: 'keyed-wake-up',
      queue: 'keyed-listen-test',
      payload: z.object({ key: z.string() }),
      concurrencyKey: (p) => p.key,
      handler: async (p) => void started.push(p.key),
    });
    // A job already waiting, written with plain SQL (no notification): the admission pass a
    // listener runs once it listens takes it, so once it has run that pass is over, and what
    // starts afterwards was woken by its own insert.
    await db.pool.query(
      `INSERT INTO skiplock.jobs (queue, job_type, payload, status, concurrency_key, concurrency_limit)
       VALUES ('keyed-listen-test', 'keyed-wake-up', '{"key":"tenant:warm"}', 'waiting', 'tenant:warm', 1)`,
    );
    // Ten minutes between polls and between admission passes: only the insert's notification can
    // admit and start the second job within the test's deadline.
    const worker = testWorker(db.newPool(4), [keyed], {
      listen: true,
      pollIntervalMs: 600_000,
      admitter: { intervalMs: 600_000 },
    });
    await worker.start();
    try {
      await waitFor(() => started.includes('tenant:warm'), {
        timeoutMs: 10_000,
        what: "the listener's first admission pass to run the waiting job",
      });
      await client.enqueue(keyed, { key: 'tenant:two' });
      await waitFor(() => started.includes('tenant:two'), {
        timeoutMs: 10_000,
        what: 'the notified admitter to admit and start the keyed job',
      });
    } finally {
      await worker.stop();
    }
  });

  it('a listening worker starts new work without waiting for its poll interval', async () => {
    let started = 0;
    const wake = defineJob({
      type: 'wake-up',
      queue: 'listen-test',
      payload: z.object({}),
      handler: async () => void (started += 1),
    });
    // Ten minutes between polls: only a notification can start this job within the test's deadline.
    const worker = testWorker(db.newPool(4), [wake], { listen: true, pollIntervalMs: 600_000 });
    await worker.start();
    try {
      // The first claim happens at start; wait until the worker sits idle, then enqueue.
      await waitFor(async () => {
        const { rows } = await db.pool.query(
          `SELECT 1 FROM pg_stat_activity WHERE application_name = 'skiplock-listener' AND datname = current_database()`,
        );
        return rows.length === 1;
      });
      await client.enqueue(wake, {});
      await waitFor(() => started === 1, {
        timeoutMs: 10_000,
        what: 'the notified worker to start the job',
      });
    } finally {
      await worker.stop();
    }
  });

  /**
   * A job whose first run holds on until its worker's stop aborts it, and whose second finishes;
   * `runs` counts them.
   */
  function heldThenQuick(options: { type: string; key?: string }) {
    const state = { runs: 0 };
    const job = defineJob({
      type: options.type,
      queue: `${options.type}-test`,
      payload: z.object({}),
      ...(options.key ? { concurrencyKey: () => options.key!, concurrencyLimit: 1 } : {}),
      handler: (_p, ctx) => {
        state.runs += 1;
        if (state.runs > 1) return Promise.resolve();
        return new Promise<void>((_resolve, reject) =>
          ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error)),
        );
      },
    });
    return { job, state };
  }

  /**
   * Starts the job on one worker, then a second that listens and polls (and admits) only every
   * ten minutes, stops the first past its deadline, and waits for the second to complete the job:
   * only the hand-back's notification can get it there in time.
   */
  async function takenAfterHandBack(
    { job, state }: ReturnType<typeof heldThenQuick>,
    id: string,
    stoppingOptions: Partial<WorkerOptions>,
  ) {
    const stopping = testWorker(db.pool, [job], { pollIntervalMs: 20, ...stoppingOptions });
    await stopping.start();
    await waitFor(() => state.runs === 1, { what: 'the first worker to start the job' });
    const taking = testWorker(db.newPool(4), [job], {
      listen: true,
      pollIntervalMs: 600_000,
      admitter: { intervalMs: 600_000 },
    });
    await taking.start();
    try {
      await waitFor(async () => {
        const { rows } = await db.pool.query(
          `SELECT 1 FROM pg_stat_activity WHERE application_name = 'skiplock-listener' AND datname = current_database()`,
        );
        return rows.length === 1;
      });
      await stopping.stop({ timeoutMs: 50 });
      await waitFor(
        async () => {
          const { rows } = await db.pool.query<{ status: string }>(
            'SELECT status FROM skiplock.jobs WHERE id = $1',
            [id],
          );
          return rows[0]?.status === 'completed';
        },
        { timeoutMs: 10_000, what: 'the listening worker to run the handed-back job' },
      );
      expect(state.runs).toBe(2);
    } finally {
      await taking.stop();
    }
  }

  it('a job a stopping worker hands back wakes a listening worker, which takes it at once', async () => {
    const held = heldThenQuick({ type: 'handed-back' });
    const { id } = await client.enqueue(held.job, {});
    await takenAfterHandBack(held, id, {});
  });

  it('a keyed job a stopping worker hands back wakes a listening admitter, which runs it at once', async () => {
    const held = heldThenQuick({ type: 'keyed-handed-back', key: 'tenant:one' });
    const { id } = await client.enqueue(held.job, {});
    // Back, it waits for its key's slot again. The stopping worker admits nothing itself (its
    // admitter would admit the job it hands back); a separate pass gives the job its slot first.
    expect(await createAdmitter({ pool: db.pool, logger: quiet }).runOnce()).toEqual({
      admitted: 1,
    });
    await takenAfterHandBack(held, id, { admitter: false });
  });
});
