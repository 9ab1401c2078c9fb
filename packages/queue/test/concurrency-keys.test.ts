import { describe, expect, it, beforeEach } from 'vitest';
import { z } from 'zod';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { PgDialect } from 'drizzle-orm/pg-core';
import {
  ConfigError,
  createAdmitter,
  createClient,
  createWorker,
  defineJob,
} from '../src/index.js';
import { retryDeadJobs } from '../src/overview.js';
import { claimJobs } from '../src/sql/claim.js';
import { fastBackoff, jobRow, quiet, testWorker } from './fixtures.js';
import { metricValue } from '../../../test/support/metrics.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });
const admitter = createAdmitter({ pool: db.pool, logger: quiet });

beforeEach(async () => {
  await db.pool.query('TRUNCATE skiplock.jobs');
});

const tenantJob = defineJob({
  type: 'tenant.sync',
  queue: 'ck',
  payload: z.object({ tenant: z.string(), n: z.number() }),
  concurrencyKey: (p) => `tenant:${p.tenant}`,
  concurrencyLimit: 2,
  handler: async () => {},
});

/** Jobs by status for each concurrency key (unkeyed jobs under ''). */
async function byKey(): Promise<Record<string, Record<string, number>>> {
  const { rows } = await db.pool.query<{ key: string; status: string; n: number }>(
    `SELECT coalesce(concurrency_key, '') AS key, status, count(*)::int AS n
     FROM skiplock.jobs GROUP BY 1, 2 ORDER BY 1, 2`,
  );
  const out: Record<string, Record<string, number>> = {};
  for (const r of rows) (out[r.key] ??= {})[r.status] = r.n;
  return out;
}

describe('concurrency keys', () => {
  it('inserts keyed jobs waiting, and admission makes at most `limit` of a key pending', async () => {
    await client.enqueueMany(
      tenantJob,
      ['a', 'a', 'a', 'a', 'b'].map((tenant, n) => ({ payload: { tenant, n } })),
    );
    expect(await byKey()).toEqual({ 'tenant:a': { waiting: 4 }, 'tenant:b': { waiting: 1 } });
    expect(await admitter.runOnce()).toEqual({ admitted: 3 });
    expect(await byKey()).toEqual({
      'tenant:a': { pending: 2, waiting: 2 },
      'tenant:b': { pending: 1 },
    });
    // Nothing freed, nothing more admitted, however often it runs.
    expect(await admitter.runOnce()).toEqual({ admitted: 0 });
    expect(await admitter.runOnce({ keys: ['tenant:a'] })).toEqual({ admitted: 0 });
    // Admission order within a key is the claim order: priority, then run_at, then id.
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT (payload->>'n')::int AS n FROM skiplock.jobs
       WHERE concurrency_key = 'tenant:a' AND status = 'pending' ORDER BY id`,
    );
    expect(rows.map((r) => r.n)).toEqual([0, 1]);
  });

  it('never holds other keys or unkeyed jobs back behind a busy key (no head-of-line blocking)', async () => {
    const plain = defineJob({
      type: 'plain',
      queue: 'ck',
      payload: z.object({}),
      handler: async () => {},
    });
    // 200 jobs of one key, limit 1, ahead of everything else in the queue and at higher priority.
    await client.enqueueMany(
      tenantJob,
      Array.from({ length: 200 }, (_, n) => ({
        payload: { tenant: 'busy', n },
        priority: 10,
        concurrencyLimit: 1,
      })),
    );
    await client.enqueue(tenantJob, { tenant: 'calm', n: 0 });
    await client.enqueue(plain, {});
    await admitter.runOnce();
    const ran: string[] = [];
    const worker = testWorker(
      db.pool,
      [
        { ...tenantJob, handler: (p: { tenant: string }) => void ran.push(p.tenant) },
        { ...plain, handler: () => void ran.push('plain') },
      ],
      { queues: ['ck'], concurrency: 10, admitter: false },
    );
    // One claim takes the busy key's one admitted job, the calm key's and the plain job: the
    // 199 waiting jobs are not in the claim's index, so the claim never reads them.
    expect(await worker.runOnce()).toBe(3);
    expect(ran.sort()).toEqual(['busy', 'calm', 'plain']);
    expect((await byKey())['tenant:busy']).toEqual({ completed: 1, waiting: 199 });
  });

  it('a worker drains a key through its slots: never more than `limit` processing', async () => {
    let maxSeen = 0;
    const worker = testWorker(
      db.pool,
      [
        {
          ...tenantJob,
          handler: async () => {
            const { rows } = await db.pool.query<{ n: number }>(
              `SELECT count(*)::int AS n FROM skiplock.jobs
               WHERE concurrency_key = 'tenant:x' AND status = 'processing'`,
            );
            maxSeen = Math.max(maxSeen, rows[0]!.n);
            await new Promise((r) => setTimeout(r, 5));
          },
        },
      ],
      { queues: ['ck'], concurrency: 8, listen: true, admitter: { intervalMs: 200 } },
    );
    await worker.start();
    try {
      await client.enqueueMany(
        tenantJob,
        Array.from({ length: 40 }, (_, n) => ({ payload: { tenant: 'x', n } })),
      );
      await waitFor(async () => (await byKey())['tenant:x']?.['completed'] === 40, {
        what: '40 jobs of one key completed',
        timeoutMs: 30_000,
      });
    } finally {
      await worker.stop();
    }
    expect(maxSeen).toBe(2);
    expect(await metricValue(worker.metrics, 'skiplock_jobs_admitted_total')).toBe(40);
    // After the first two, each job came leased by the admission its predecessor's settle ran.
    expect(
      await metricValue(worker.metrics, 'skiplock_jobs_admitted_leased_total'),
    ).toBeGreaterThan(30);
  });

  it('a retry gives the slot back while it waits, and the job is admitted again once due', async () => {
    let calls = 0;
    const flaky = defineJob({
      ...tenantJob,
      type: 'tenant.flaky',
      concurrencyLimit: 1,
      // Long enough to still be ahead after the four round trips and the run below that expect
      // it not yet due; 300 ms could pass in them on a loaded machine.
      backoff: { ...fastBackoff, baseMs: 2_000, maxMs: 2_000 },
      handler: async (p: { n: number }) => {
        calls += 1;
        if (p.n === 0 && calls === 1) throw new Error('first attempt fails');
      },
    });
    const [first] = await client.enqueueMany(flaky, [
      { payload: { tenant: 't', n: 0 } },
      { payload: { tenant: 't', n: 1 } },
    ]);
    const worker = testWorker(db.pool, [flaky], { queues: ['ck'], admitter: false });
    await admitter.runOnce();
    expect(await worker.runOnce()).toBe(1);
    // The failed job waits for its retry without its slot, so the second job was admitted.
    const job = await client.getJob(first!.id);
    expect(job).toMatchObject({ status: 'waiting', attempts: 1, concurrencyKey: 'tenant:t' });
    await admitter.runOnce({ keys: ['tenant:t'] });
    expect(await byKey()).toEqual({ 'tenant:t': { pending: 1, waiting: 1 } });
    expect(await worker.runOnce()).toBe(1);
    // Not due yet: the pass leaves it waiting; once due, the pass admits it and it runs.
    expect(await admitter.runOnce()).toEqual({ admitted: 0 });
    await waitFor(async () => (await admitter.runOnce()).admitted === 1, {
      what: 'the retry admitted once due',
    });
    expect(await worker.runOnce()).toBe(1);
    expect(await byKey()).toEqual({ 'tenant:t': { completed: 2 } });
  });

  it('leases an admitted job to the admitting worker only if it runs its queue and type', async () => {
    const one = defineJob({ ...tenantJob, type: 'tenant.lease', concurrencyLimit: 1 });
    await client.enqueueMany(one, [
      { payload: { tenant: 'l', n: 0 } },
      { payload: { tenant: 'm', n: 0 } },
    ]);
    const adopted: string[] = [];
    const leasing = (types: string[]) =>
      createAdmitter({
        pool: db.pool,
        logger: quiet,
        lease: {
          workerId: 'w-lease',
          queues: ['ck'],
          types,
          room: () => 1,
          adopt: (rows) => adopted.push(...rows.map((r) => `${r.concurrency_key}:${r.attempts}`)),
        },
      });
    // Another type: both jobs become pending for whoever claims them.
    await leasing(['other']).runOnce({ keys: ['tenant:l'] });
    expect(adopted).toEqual([]);
    expect((await byKey())['tenant:l']).toEqual({ pending: 1 });
    // Its type, room for one: leased to it as a claim would (attempt 1, lock token, lease).
    await leasing(['tenant.lease']).runOnce({ keys: ['tenant:m'] });
    expect(adopted).toEqual(['tenant:m:1']);
    const { rows } = await db.pool.query(
      `SELECT status, locked_by, attempts, lease_expires_at > now() AS leased
       FROM skiplock.jobs WHERE concurrency_key = 'tenant:m'`,
    );
    expect(rows).toEqual([
      { status: 'processing', locked_by: 'w-lease', attempts: 1, leased: true },
    ]);
  });

  it('leaves a waiting job another transaction holds to a later admission, and never leases it stale', async () => {
    const one = defineJob({
      ...tenantJob,
      type: 'tenant.late',
      concurrencyLimit: 1,
      leaseMs: 1_000,
    });
    await client.enqueueMany(one, [
      { payload: { tenant: 'p', n: 0 } },
      { payload: { tenant: 'q', n: 0 } },
    ]);
    const adopted: string[] = [];
    const leasing = createAdmitter({
      pool: db.pool,
      logger: quiet,
      lease: {
        workerId: 'w-late',
        queues: ['ck'],
        types: ['tenant.late'],
        room: () => 2,
        adopt: (rows) => adopted.push(...rows.map((r) => r.concurrency_key!)),
      },
    });
    const leases = async () =>
      (
        await db.pool.query(
          `SELECT concurrency_key AS key, status, lease_expires_at > clock_timestamp() AS leased
           FROM skiplock.jobs WHERE job_type = 'tenant.late' ORDER BY 1`,
        )
      ).rows;
    // An application's transaction holds a waiting job's row (as a debounce of it would) for
    // longer than the job's lease.
    const app = await db.pool.connect();
    await app.query('BEGIN');
    await app.query(`SELECT id FROM skiplock.jobs WHERE concurrency_key = 'tenant:p' FOR UPDATE`);
    const pass = leasing.runOnce({ keys: ['tenant:p', 'tenant:q'] });
    const waited = await Promise.race([
      pass.then(() => false),
      new Promise((resolve) => setTimeout(() => resolve(true), 1_500)),
    ]);
    await app.query('COMMIT');
    app.release();
    await pass;
    // Before: the pass waited for the row, and both leases had run out when it returned.
    expect(waited).toBe(false);
    expect(adopted).toEqual(['tenant:q']);
    expect(await leases()).toEqual([
      { key: 'tenant:p', status: 'waiting', leased: null },
      { key: 'tenant:q', status: 'processing', leased: true },
    ]);
    await leasing.runOnce({ keys: ['tenant:p'] });
    expect(adopted).toEqual(['tenant:q', 'tenant:p']);
    expect((await leases())[0]).toEqual({ key: 'tenant:p', status: 'processing', leased: true });
  });

  it('cancelling a pending job admits the next; a retried dead job waits for a slot', async () => {
    const one = defineJob({ ...tenantJob, type: 'tenant.one', concurrencyLimit: 1 });
    const [a, b] = await client.enqueueMany(one, [
      { payload: { tenant: 'c', n: 0 } },
      { payload: { tenant: 'c', n: 1 } },
    ]);
    await admitter.runOnce();
    expect((await client.getJob(a!.id))!.status).toBe('pending');
    expect(await client.cancelJob(a!.id)).toBe(true);
    expect((await client.getJob(b!.id))!.status).toBe('pending');
    // A cancelled job retried by an operator goes back through admission: b holds the slot.
    expect(await client.retryJob(a!.id)).toBe(true);
    expect((await client.getJob(a!.id))!.status).toBe('waiting');
    expect(await client.cancelJob(b!.id)).toBe(true);
    expect((await client.getJob(a!.id))!.status).toBe('pending');
  });

  it('a cancel whose admission of the next job fails still reports the cancel, and logs why', async () => {
    const logs = captureLogs();
    const logged = createClient({ pool: db.pool, logger: logs.logger });
    const one = defineJob({ ...tenantJob, type: 'tenant.blocked', concurrencyLimit: 1 });
    const [a, b] = await client.enqueueMany(one, [
      { payload: { tenant: 'x', n: 0 } },
      { payload: { tenant: 'x', n: 1 } },
    ]);
    await admitter.runOnce();
    // The admission after the cancel fails: a trigger refuses b's move out of waiting.
    await db.pool.query(`
      CREATE FUNCTION pg_temp_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'admission refused for the test'; END $$;
      CREATE TRIGGER refuse_admission BEFORE UPDATE ON skiplock.jobs FOR EACH ROW
        WHEN (OLD.status = 'waiting' AND OLD.concurrency_key = 'tenant:x')
        EXECUTE FUNCTION pg_temp_refuse()`);
    try {
      // Before: this threw 'admission refused for the test', although a was cancelled.
      expect(await logged.cancelJob(a!.id)).toBe(true);
      expect((await client.getJob(a!.id))!.status).toBe('cancelled');
      expect((await client.getJob(b!.id))!.status).toBe('waiting');
      expect(logs.lines.find((l) => l.reason === 'admit_after_failed')).toMatchObject({
        jobId: a!.id,
        err: expect.stringContaining('admission refused for the test'),
      });
    } finally {
      await db.pool.query(
        'DROP TRIGGER refuse_admission ON skiplock.jobs; DROP FUNCTION pg_temp_refuse()',
      );
    }
    // The admission passes take it from there.
    await admitter.runOnce();
    expect((await client.getJob(b!.id))!.status).toBe('pending');
  });

  it('retryDeadJobs whose admission fails after the retry still reports the ids, and logs why', async () => {
    const logs = captureLogs();
    const one = defineJob({ ...tenantJob, type: 'tenant.dead', concurrencyLimit: 1 });
    const { id } = await client.enqueue(one, { tenant: 'y', n: 0 });
    await db.pool.query(`UPDATE skiplock.jobs SET status = 'dead' WHERE id = $1`, [id]);
    await db.pool.query(`
      CREATE FUNCTION pg_temp_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'admission refused for the test'; END $$;
      CREATE TRIGGER refuse_admission BEFORE UPDATE ON skiplock.jobs FOR EACH ROW
        WHEN (OLD.status = 'waiting' AND OLD.concurrency_key = 'tenant:y')
        EXECUTE FUNCTION pg_temp_refuse()`);
    try {
      // Before: this threw 'admission refused for the test' although the retry had committed,
      // and a second call found nothing dead to retry, so the ids were never reported.
      expect(await retryDeadJobs(db.pool, [id], { logger: logs.logger })).toEqual([id]);
      expect((await client.getJob(id))!.status).toBe('waiting');
      expect(logs.lines.find((l) => l.reason === 'admit_after_failed')).toMatchObject({
        jobIds: [id],
        err: expect.stringContaining('admission refused for the test'),
      });
    } finally {
      await db.pool.query(
        'DROP TRIGGER refuse_admission ON skiplock.jobs; DROP FUNCTION pg_temp_refuse()',
      );
    }
    await admitter.runOnce();
    expect((await client.getJob(id))!.status).toBe('pending');
  });

  it('a delayed job is admitted only when due, so it holds no slot before', async () => {
    const one = defineJob({ ...tenantJob, type: 'tenant.later', concurrencyLimit: 1 });
    const later = await client.enqueue(one, { tenant: 'd', n: 0 }, { delayMs: 60_000 });
    const now = await client.enqueue(one, { tenant: 'd', n: 1 });
    await admitter.runOnce();
    expect((await client.getJob(later.id))!.status).toBe('waiting');
    expect((await client.getJob(now.id))!.status).toBe('pending');
  });

  it('takes the key and limit from the enqueue when given; null means no key', async () => {
    const plainKeyed = defineJob({
      type: 'opt',
      queue: 'ck',
      payload: z.object({}),
      handler: async () => {},
    });
    const a = await client.enqueue(plainKeyed, {}, { concurrencyKey: 'api', concurrencyLimit: 3 });
    const b = await client.enqueue(tenantJob, { tenant: 'e', n: 0 }, { concurrencyKey: null });
    expect(await client.getJob(a.id)).toMatchObject({
      status: 'waiting',
      concurrencyKey: 'api',
      concurrencyLimit: 3,
    });
    expect(await client.getJob(b.id)).toMatchObject({ status: 'pending', concurrencyKey: null });
  });

  it('refuses a bad key, naming the job type and what was wrong, and stores nothing', async () => {
    const bad = defineJob({
      ...tenantJob,
      type: 'tenant.bad',
      concurrencyKey: (p) => (p.tenant === 'long' ? 'x'.repeat(201) : ''),
    });
    await expect(client.enqueue(bad, { tenant: 'long', n: 0 })).rejects.toThrow(ConfigError);
    await expect(client.enqueue(bad, { tenant: 'empty', n: 0 })).rejects.toThrow(
      /job type "tenant.bad": concurrencyKey returned ""/,
    );
    await expect(
      client.enqueue(tenantJob, { tenant: 'a', n: 0 }, { concurrencyLimit: 0 }),
    ).rejects.toThrow(/concurrencyLimit/);
    expect(() =>
      defineJob({ ...tenantJob, concurrencyKey: 'tenant' as unknown as () => string }),
    ).toThrow(/concurrencyKey must be a function/);
    expect(await byKey()).toEqual({});
  });

  it('admitters racing on one key over many connections never admit past the limit', async () => {
    const one = defineJob({ ...tenantJob, type: 'tenant.race', concurrencyLimit: 3 });
    await client.enqueueMany(
      one,
      Array.from({ length: 50 }, (_, n) => ({ payload: { tenant: 'r', n } })),
    );
    const pools = Array.from({ length: 4 }, () => db.newPool(5));
    const racers = pools.map((pool) => createAdmitter({ pool, logger: quiet }));
    // 20 admissions at once, half waiting for the key's lock and half skipping it when held.
    await Promise.all(
      racers.flatMap((r) =>
        Array.from({ length: 5 }, (_, i) =>
          i % 2 ? r.runOnce() : r.runOnce({ keys: ['tenant:r'] }),
        ),
      ),
    );
    expect(await byKey()).toEqual({ 'tenant:r': { pending: 3, waiting: 47 } });
  });

  it('refuses to admit under a fixed snapshot, which could miss a concurrent admission', async () => {
    const tx = await db.pool.connect();
    try {
      await tx.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await expect(
        tx.query(`SELECT * FROM skiplock.admit(ARRAY['k'], true, 1, NULL, NULL, 0, NULL, NULL)`),
      ).rejects.toThrow(/READ COMMITTED/);
    } finally {
      await tx.query('ROLLBACK');
      tx.release();
    }
  });

  it('reads indexes only: the claim skips 40,000 waiting jobs, admission reads a few pages', async () => {
    // 40 waiting jobs in each of 1,000 keys, one admitted per key, and 40,000 finished jobs.
    await db.pool.query(`
      INSERT INTO skiplock.jobs (queue, job_type, status, concurrency_key, concurrency_limit)
      SELECT 'plan', 't', 'waiting', 'tenant:' || (g % 1000), 1 FROM generate_series(1, 41000) g;
      INSERT INTO skiplock.jobs (queue, job_type, status, completed_at)
      SELECT 'plan', 't', 'completed', now() FROM generate_series(1, 40000);
      ANALYZE skiplock.jobs`);
    await admitter.runOnce();
    const plan = async (text: string, params: unknown[] = []) =>
      (
        await db.pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, BUFFERS) ${text}`, params)
      ).rows
        .map((r) => r['QUERY PLAN'])
        .join('\n');
    // The statements skiplock.admit() runs for one key (migrations-flow/0000_admission.sql).
    const head = await plan(`
      SELECT j.concurrency_limit FROM skiplock.jobs j
      WHERE j.concurrency_key = 'tenant:7' AND j.status = 'waiting' AND j.run_at <= now()
      ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1`);
    expect(head).toMatch(/Index Scan using jobs_waiting_idx/);
    // A stopped run holds its slot too (migrations-flow/0005_stopping_runs_hold_slots.sql).
    const slots = await plan(`
      SELECT count(*) FROM skiplock.jobs j
      WHERE j.concurrency_key = 'tenant:7'
        AND (j.status IN ('pending', 'retryable', 'processing')
             OR (j.status = 'cancelled' AND j.lease_expires_at IS NOT NULL
                 AND j.lease_expires_at > clock_timestamp()))`);
    expect(slots).toMatch(/Index Only Scan using jobs_slot_holders_idx/);
    const nextKey = await plan(`
      SELECT j.concurrency_key FROM skiplock.jobs j
      WHERE j.status = 'waiting' AND j.concurrency_key > 'tenant:7'
      ORDER BY j.concurrency_key LIMIT 1`);
    expect(nextKey).toMatch(/Index Only Scan using jobs_waiting_idx/);
    for (const p of [head, slots, nextKey]) {
      expect(p).not.toMatch(/Seq Scan|Sort/);
      // A handful of pages, not a scan of the key's backlog or of the table.
      const hits = [...p.matchAll(/shared hit=(\d+)/g)].map((m) => Number(m[1]));
      expect(Math.max(...hits)).toBeLessThan(20);
    }
    // The claim: one ordered scan of the claim index, which holds the 1,000 admitted jobs only.
    const q = new PgDialect().sqlToQuery(
      claimJobs({ queues: ['plan'], limit: 100, workerId: 'w', agingMs: null, asyncCommit: true }),
    );
    const claim = await plan(q.sql, q.params);
    expect(claim).toMatch(/Index Scan using jobs_claim_idx/);
    expect(claim).not.toMatch(/Seq Scan|jobs_waiting_idx/);
    // It reads the 100 rows it takes: no waiting row is in its way.
    expect(claim).toMatch(
      /Index Scan using jobs_claim_idx on jobs j .*actual time=\S+ rows=100 loops=1/,
    );
  });

  it("admits a key's next job only once a timed-out handler has really returned", async () => {
    const events: string[] = [];
    const stubborn = defineJob({
      ...tenantJob,
      type: 'tenant.stubborn',
      concurrencyLimit: 1,
      timeoutMs: 100,
      maxAttempts: 1,
      // Ignores its signal: the attempt ends at 100 ms, the handler at 600 ms.
      handler: async (p: { n: number }) => {
        events.push(`start ${p.n}`);
        if (p.n === 0) await new Promise((r) => setTimeout(r, 600));
        events.push(`end ${p.n}`);
      },
    });
    const worker = testWorker(db.pool, [stubborn], {
      queues: ['ck'],
      listen: true,
      admitter: { intervalMs: 3_600_000 },
    });
    await worker.start();
    try {
      // Its LISTEN connection up first: coming up, it admits every key once, and that admission
      // must not be the one that follows job 0's timeout (a slow machine made it so). Done with
      // its first claim, not merely connected: the wake that claims there is sent with the one
      // that admits, after LISTEN; the connection shows before either.
      await waitFor(async () => {
        const { rows } = await db.pool.query(
          `SELECT 1 FROM pg_stat_activity
           WHERE application_name = 'skiplock-listener' AND datname = current_database()
             AND state = 'idle' AND query LIKE '%FOR UPDATE SKIP LOCKED%'`,
        );
        return rows.length > 0;
      });
      await client.enqueueMany(stubborn, [
        { payload: { tenant: 's', n: 0 } },
        { payload: { tenant: 's', n: 1 } },
      ]);
      await admitter.runOnce();
      await waitFor(async () => events.includes('end 1'), {
        what: 'the second job',
        timeoutMs: 10_000,
      });
    } finally {
      await worker.stop();
    }
    expect(events).toEqual(['start 0', 'end 0', 'start 1', 'end 1']);
  });

  it('a stopped run whose handler returns after its worker stopped and ended its own pool writes nothing', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const signals: AbortSignal[] = [];
    const mutex = defineJob({
      ...tenantJob,
      type: 'tenant.late',
      concurrencyLimit: 1,
      leaseMs: 1_200,
      handler: async (_p, ctx) => {
        signals.push(ctx.signal);
        await gate;
      },
    });
    const [a] = await client.enqueueMany(mutex, [{ payload: { tenant: 'l', n: 0 } }]);
    await admitter.runOnce();
    const logs = captureLogs();
    // A pool of the worker's own, ended by its stop().
    const worker = createWorker({
      connectionString: db.url,
      jobs: [mutex],
      queues: ['ck'],
      logger: logs.logger,
      sweeper: false,
      retention: false,
      listen: false,
    });
    const run = worker.runOnce();
    await waitFor(() => signals.length === 1);
    expect(await client.cancelJob(a!.id, { running: true })).toBe(true);
    await waitFor(() => signals[0]!.aborted, { timeoutMs: 5_000 });
    await run;
    await worker.stop({ timeoutMs: 1_000 });
    release();
    await new Promise((r) => setTimeout(r, 500));
    // Before: the release was sent on the ended pool and retried, a warning each time.
    expect(logs.reasons().filter((r) => r === 'db_error' || r === 'settle_failed')).toEqual([]);
  });

  it('a stopped run holds its slot until its handler returns, and its job is not retried meanwhile', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const signals: AbortSignal[] = [];
    const mutex = defineJob({
      ...tenantJob,
      type: 'tenant.mutex',
      concurrencyLimit: 1,
      leaseMs: 1_200,
      // Ignores its signal until the gate opens: a handler busy in a call it cannot abort.
      handler: async (_p, ctx) => {
        signals.push(ctx.signal);
        await gate;
      },
    });
    const [a, b] = await client.enqueueMany(mutex, [
      { payload: { tenant: 'm', n: 0 } },
      { payload: { tenant: 'm', n: 1 } },
    ]);
    await admitter.runOnce();
    const worker = testWorker(db.pool, [mutex], { queues: ['ck'] });
    const lost: string[] = [];
    worker.on('job:lock_lost', (e) => lost.push(e.jobId));
    const run = worker.runOnce();
    await waitFor(() => signals.length === 1);
    expect(await client.cancelJob(a!.id, { running: true })).toBe(true);
    // Its worker sees the stop at its next renewal, a third of the lease (400 ms) at most.
    await waitFor(() => signals[0]!.aborted, { timeoutMs: 5_000 });
    // Before: the stop gave the slot back at once, and job 1 was admitted beside the handler
    // still running: two jobs of a key of limit 1 at once.
    expect(await admitter.runOnce()).toEqual({ admitted: 0 });
    expect(await byKey()).toEqual({ 'tenant:m': { cancelled: 1, waiting: 1 } });
    const holders = await client.listJobs({ concurrencyKey: 'tenant:m', holdingSlot: true });
    expect(holders.map((j) => [j.id, j.status])).toEqual([[a!.id, 'cancelled']]);
    // Retried now, it would run beside its own stopped run.
    expect(await client.retryJob(a!.id)).toBe(false);
    release();
    await run;
    const lease = async () =>
      (
        await db.pool.query<{ lease_expires_at: Date | null }>(
          'SELECT lease_expires_at FROM skiplock.jobs WHERE id = $1',
          [a!.id],
        )
      ).rows[0]!.lease_expires_at;
    // The handler returned: its worker clears the lease and admits the key's next job (a
    // worker's stop() waits for that admission).
    await waitFor(async () => (await lease()) === null);
    await worker.stop();
    expect(lost).toEqual([a!.id]);
    expect(await byKey()).toEqual({ 'tenant:m': { cancelled: 1, pending: 1 } });
    expect(await client.listJobs({ concurrencyKey: 'tenant:m', holdingSlot: true })).toMatchObject([
      { id: b!.id, status: 'pending' },
    ]);
    expect(await client.retryJob(a!.id)).toBe(true);
    expect(await byKey()).toEqual({ 'tenant:m': { pending: 1, waiting: 1 } });
  });

  it("a stopped run's release is fenced by its lease: a retried run on the same worker, stopped too, keeps its slot", async () => {
    const gates: (() => void)[] = [];
    const signals: AbortSignal[] = [];
    const mutex = defineJob({
      ...tenantJob,
      type: 'tenant.again',
      concurrencyLimit: 1,
      leaseMs: 1_200,
      // Ignores its signal until its gate opens.
      handler: async (_p, ctx) => {
        signals.push(ctx.signal);
        await new Promise<void>((open) => gates.push(open));
      },
    });
    const a = await client.enqueue(mutex, { tenant: 'r', n: 0 });
    await admitter.runOnce();
    const worker = testWorker(db.pool, [mutex], { queues: ['ck'], concurrency: 2 });
    const stopRun = async (n: number) => {
      const run = worker.runOnce();
      await waitFor(() => signals.length === n);
      expect(await client.cancelJob(a.id, { running: true })).toBe(true);
      await run;
      expect(signals[n - 1]!.aborted).toBe(true);
    };
    await stopRun(1);
    // The first run's handler works on past its whole lease; then an operator retries the job,
    // which this worker runs again (at attempt 1: a retry starts the attempts afresh) and which
    // is stopped again.
    await db.pool.query(
      `UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 ms' WHERE id = $1`,
      [a.id],
    );
    expect(await client.retryJob(a.id)).toBe(true);
    await admitter.runOnce();
    await stopRun(2);
    await client.enqueue(mutex, { tenant: 'r', n: 1 });
    const lease = async () =>
      (
        await db.pool.query<{ lease_expires_at: Date | null }>(
          'SELECT lease_expires_at FROM skiplock.jobs WHERE id = $1',
          [a.id],
        )
      ).rows[0]!.lease_expires_at;
    // The first run's handler returns. Before, its release (same job, attempt and worker)
    // cleared the second run's lease, and the key's next job started beside that run's handler.
    gates[0]!();
    await new Promise((r) => setTimeout(r, 300));
    expect(await lease()).not.toBeNull();
    expect(await admitter.runOnce()).toEqual({ admitted: 0 });
    gates[1]!();
    await waitFor(async () => (await lease()) === null);
    await worker.stop();
    expect(await byKey()).toEqual({ 'tenant:r': { cancelled: 1, pending: 1 } });
  });

  it('a stopped run whose worker is gone holds its slot until its lease runs out', async () => {
    const mutex = defineJob({ ...tenantJob, type: 'tenant.gone', concurrencyLimit: 1 });
    const [a] = await client.enqueueMany(mutex, [
      { payload: { tenant: 'g', n: 0 } },
      { payload: { tenant: 'g', n: 1 } },
    ]);
    await admitter.runOnce();
    // Running on a worker that is gone, its lease live for 1.5 s more.
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'processing', attempts = 1, locked_by = 'gone',
              locked_at = now(), lease_expires_at = clock_timestamp() + interval '1500 ms'
       WHERE id = $1`,
      [a!.id],
    );
    expect(await client.cancelJob(a!.id, { running: true })).toBe(true);
    expect(await admitter.runOnce()).toEqual({ admitted: 0 });
    expect(await client.retryJob(a!.id)).toBe(false);
    await waitFor(async () => (await admitter.runOnce()).admitted === 1, { timeoutMs: 10_000 });
    expect(await byKey()).toEqual({ 'tenant:g': { cancelled: 1, pending: 1 } });
    expect(await client.retryJob(a!.id)).toBe(true);
  });

  it('refuses a holdingSlot filter that is not a boolean', async () => {
    await expect(client.listJobs({ holdingSlot: 'yes' as unknown as boolean })).rejects.toThrow(
      'holdingSlot must be a boolean, got "yes"',
    );
  });

  it("runOnce() on a worker never started admits the key's next job, and stop() waits for it", async () => {
    const one = defineJob({ ...tenantJob, type: 'tenant.once', concurrencyLimit: 1 });
    await client.enqueueMany(one, [
      { payload: { tenant: 'o', n: 0 } },
      { payload: { tenant: 'o', n: 1 } },
    ]);
    await admitter.runOnce();
    const worker = testWorker(db.pool, [one], { queues: ['ck'] });
    expect(await worker.runOnce()).toBe(1);
    // The settled job freed its key's slot; the admission that follows is the admitter's, and a
    // worker's stop() waits for it (before, it was left running after stop() returned).
    await worker.stop();
    expect(await byKey()).toEqual({ 'tenant:o': { completed: 1, pending: 1 } });
  });

  it("a keyed job a worker lacks the type of goes back to wait for a slot, and gives its slot to the key's next job", async () => {
    const newer = defineJob({ ...tenantJob, type: 'tenant.newer', concurrencyLimit: 1 });
    const known = defineJob({ ...tenantJob, type: 'tenant.known', concurrencyLimit: 1 });
    const [handed] = await client.enqueueMany(newer, [{ payload: { tenant: 'h', n: 0 } }]);
    const [next] = await client.enqueueMany(known, [{ payload: { tenant: 'h', n: 1 } }]);
    await admitter.runOnce();
    expect(await byKey()).toEqual({ 'tenant:h': { pending: 1, waiting: 1 } });
    // A worker of the old deploy, which knows only tenant.known, claims the admitted job.
    const old = testWorker(db.pool, [known], {
      queues: ['ck'],
      unknownTypeBackoff: { baseMs: 300, factor: 1, jitter: 0 },
    });
    await old.runOnce();
    // Handed back as a retry of a keyed job is: waiting for a slot, its attempt given back, due
    // after the backoff; its slot went to the key's next job (a worker's stop() waits for that
    // admission).
    await old.stop();
    expect(await jobRow(db.pool, handed!.id)).toMatchObject({ status: 'waiting', attempts: 0 });
    expect(await jobRow(db.pool, next!.id)).toMatchObject({ status: 'pending' });
    const holders = await client.listJobs({ concurrencyKey: 'tenant:h', holdingSlot: true });
    expect(holders.map((j) => j.id)).toEqual([next!.id]);
    // A worker of the new deploy runs both, the handed-back job on its first attempt once it is
    // due and the key's slot is free again.
    const current = testWorker(db.pool, [newer, known], { queues: ['ck'] });
    await waitFor(async () => {
      await admitter.runOnce();
      await current.runOnce();
      return (await jobRow(db.pool, handed!.id)).status === 'completed' || null;
    });
    await current.stop();
    expect(await jobRow(db.pool, handed!.id)).toMatchObject({ status: 'completed', attempts: 1 });
    expect(await jobRow(db.pool, next!.id)).toMatchObject({ status: 'completed' });
  });

  it('a stopped admitter starts no admission: a late settle cannot reach an ended pool', async () => {
    const pool = db.newPool(1);
    const late = createAdmitter({ pool, logger: quiet });
    late.start();
    await late.stop();
    await pool.end();
    late.freed('tenant:late');
    late.poke('*');
    // stop() waits for a flush in progress: one started above would have failed on the ended pool.
    await late.stop();
    expect(await metricValue(late.metrics, 'skiplock_admit_failures_total')).toBe(0);
  });

  it('hands back, before stop() returns, a job an admission in flight at stop() leased here', async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const one = defineJob({
      ...tenantJob,
      type: 'tenant.stopping',
      concurrencyLimit: 1,
      handler: async (p) => {
        if (p.n === 0) await gate;
      },
    });
    // The worker owns its pool: stop() ends it.
    const worker = createWorker({
      connectionString: db.url,
      jobs: [one],
      queues: ['ck'],
      logger: quiet,
      sweeper: false,
      retention: false,
      concurrency: 2,
    });
    const blocker = await db.pool.connect();
    try {
      await worker.start();
      const started = worker.once('job:claimed');
      await client.enqueueMany(one, [
        { payload: { tenant: 's', n: 0 } },
        { payload: { tenant: 's', n: 1 } },
      ]);
      await started;
      // Another session holds the key's admission lock: the admission that follows the first
      // job's end waits for it, and is still in flight when stop() begins.
      await blocker.query(`SELECT pg_advisory_lock(377101, hashtext('tenant:s'))`);
      const completed = worker.once('job:completed');
      open();
      await completed;
      await waitFor(async () => {
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
        );
        return rows[0]!.n === 1;
      });
      const stopping = worker.stop({ timeoutMs: 5_000 });
      setTimeout(
        () => void blocker.query(`SELECT pg_advisory_unlock(377101, hashtext('tenant:s'))`),
        200,
      );
      await stopping;
      // Handed back to wait for its key's slot again, no attempt spent. Before: it was left leased
      // to the stopped worker (its release sent on an ending pool), processing at attempt 1,
      // until its lease ran out.
      const { rows } = await db.pool.query(
        `SELECT (payload->>'n')::int AS n, status::text, attempts
         FROM skiplock.jobs WHERE job_type = 'tenant.stopping' ORDER BY id`,
      );
      expect(rows).toEqual([
        { n: 0, status: 'completed', attempts: 1 },
        { n: 1, status: 'waiting', attempts: 0 },
      ]);
    } finally {
      blocker.release();
    }
  });
});
