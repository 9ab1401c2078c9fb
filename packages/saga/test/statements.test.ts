import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createWorker } from '@skiplock/queue';
import { runSql } from '@skiplock/queue/engine';
import { createSagaRuntime, defineSaga } from '../src/index.js';
import { lockSaga } from '../src/sql/sagas.js';
import { recordAttemptError, settleStep } from '../src/sql/steps.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { fast, settled, silent, startSagas } from './fixtures.js';

const db = await useTestDatabase();

/** A pool whose clients note every statement they send (one call is one round trip). */
function countingPool(): { pool: pg.Pool; sent: string[] } {
  const sent: string[] = [];
  const pool = db.newPool();
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: (...args: unknown[]) => unknown }).query = (
      ...args: unknown[]
    ) => {
      const first = args[0];
      const text = typeof first === 'string' ? first : (first as { text?: string }).text;
      sent.push((text ?? '').replace(/\s+/g, ' ').trim());
      return query(...args);
    };
  });
  return { pool, sent };
}

/** The read a step's attempt starts with when nothing carried the saga to it (`loadAttempt`). */
const isLoad = (statement: string) => /AS outputs FROM skiplock\.sagas WHERE id =/.test(statement);

describe('the cost of a saga step', () => {
  it('takes two statements on the saga tables per handed-off step, and keeps each step in the history', async () => {
    const three = defineSaga({ name: 'three', version: 1, input: z.object({ n: z.number() }) })
      .step('a', { ...fast, run: (_ctx, input) => ({ a: input.n }) })
      .step('b', { ...fast, run: (ctx) => ({ b: ctx.steps.a.a + 1 }) })
      .step('c', { ...fast, run: (ctx) => ({ c: ctx.steps.b.b + 1 }) });
    const { pool, sent } = countingPool();
    const { runtime } = await startSagas(pool, [three]);
    await runtime.start(three, { id: 'count-1', input: { n: 1 } });
    // Polled on another pool, so that the reads are not counted.
    await waitFor(
      async () =>
        (
          await db.pool.query<{ status: string }>(
            `SELECT status FROM skiplock.sagas WHERE id = 'count-1'`,
          )
        ).rows[0]?.status === 'completed',
      { what: 'saga count-1 to complete' },
    );
    const onSagaTables = sent.filter((s) => /skiplock\.saga/.test(s));
    // Start: the saga row, then its first step's history row and pointer (2). The first step
    // (claimed): its load, a read (1). Each step: the locked completion with its output and
    // attempt (1), then the next step's history row and pointer, or the saga's end (1). Steps b
    // and c are handed off with the saga as a and b left it, so they read nothing. Before this
    // was 20, then 11 while every step read the saga.
    expect(onSagaTables).toHaveLength(2 + 1 + 3 * 2);
    expect(onSagaTables.filter(isLoad)).toHaveLength(1);
    // The saga's pointer moves to b and to c in the statement that inserts their handed-off jobs;
    // only the start (its first job was not handed off) sends it on its own.
    expect(sent.filter((s) => s.startsWith('WITH handed_off_job AS'))).toHaveLength(2);
    expect(sent.filter((s) => s.startsWith('WITH history AS'))).toHaveLength(1);
    const saga = await settled(runtime, 'count-1');
    expect(saga.history.map((h) => [h.step, h.status, h.attempts])).toEqual([
      ['a', 'completed', 1],
      ['b', 'completed', 1],
      ['c', 'completed', 1],
    ]);
    for (const h of saga.history) {
      expect(h.startedAt).not.toBeNull();
      expect(h.finishedAt!.getTime()).toBeGreaterThanOrEqual(h.startedAt!.getTime());
      expect(h.startedAt!.getTime()).toBeGreaterThanOrEqual(h.createdAt.getTime());
    }
  });

  it("sends a step's saga lock in the same write as BEGIN and the job's fence once its connection knows both", async () => {
    const plain = defineSaga({ name: 'plain', version: 1, input: z.object({ n: z.number() }) })
      .step('a', { ...fast, run: (_ctx, input) => ({ a: input.n }) })
      .step('b', { ...fast, run: (ctx) => ({ b: ctx.steps.a.a + 1 }) })
      .step('c', { ...fast, run: (ctx) => ({ c: ctx.steps.b.b + 1 }) });
    const { pool, sent } = countingPool();
    let connections = 0;
    pool.on('connect', () => (connections += 1));
    const { runtime } = await startSagas(pool, [plain]);
    const sagas = 8;
    for (let i = 0; i < sagas; i++) {
      await runtime.start(plain, { id: `plain-${i}`, input: { n: i } });
      const saga = await settled(runtime, `plain-${i}`);
      expect(saga.status).toBe('completed');
      expect(saga.history.map((h) => h.output)).toEqual([{ a: i }, { b: i + 1 }, { c: i + 2 }]);
    }
    // The step's lock and record of its output (lockAndComplete), as its own round trip or in
    // the write that opens the completing transaction with BEGIN and the job's fence.
    const locks = sent.filter((s) => /WITH s AS \( SELECT .* FOR UPDATE \), settled AS/.test(s));
    const withFence = locks.filter((s) => /^BEGIN[^;]*; UPDATE skiplock\.jobs/.test(s));
    expect(locks).toHaveLength(sagas * 3);
    // Alone only on a connection that had not parsed it (or the fence) yet: at most once per
    // connection for each of its two texts (the last step's returns no outputs).
    expect(locks.length - withFence.length).toBeLessThanOrEqual(2 * connections);
    expect(withFence.length).toBeGreaterThanOrEqual(sagas * 3 - 2 * connections);
    expect(withFence.length).toBeGreaterThan(sagas);
  });

  it('gives a handed-off step the saga and outputs a read would have: the same values and key order', async () => {
    // jsonb orders an object's keys (shorter first), so a step's output reads back in another
    // order than the step returned it: what the handed-off step sees must be that read's order.
    const seen: { id: string; step: string; view: string }[] = [];
    const seenBy = (ctx: {
      input: unknown;
      steps: unknown;
      attempt: number;
      idempotencyKey: string;
    }) =>
      JSON.stringify({
        input: ctx.input,
        steps: ctx.steps,
        attempt: ctx.attempt,
        key: ctx.idempotencyKey,
      });
    const view = defineSaga({
      name: 'view',
      version: 1,
      input: z.object({ name: z.string(), nested: z.object({ zz: z.number(), a: z.number() }) }),
      deadlineMs: 60_000,
    })
      .step('first', { ...fast, run: () => ({ zebra: 1, ant: { yy: 2, x: [1, 2.5, 'é'] } }) })
      .step('second', {
        ...fast,
        run: (ctx) => {
          seen.push({ id: ctx.sagaId, step: 'second', view: seenBy(ctx) });
          return { bee: ctx.steps.first.zebra + 1, aa: null };
        },
      })
      .step('third', {
        ...fast,
        run: (ctx) => {
          seen.push({ id: ctx.sagaId, step: 'third', view: seenBy(ctx) });
          return 'done';
        },
      });
    const input = { name: 'n', nested: { zz: 1, a: 2 } };
    const run = async (id: string, maxHandOffs: number) => {
      const { pool, sent } = countingPool();
      const runtime = createSagaRuntime({ pool, sagas: [view], logger: silent });
      const worker = createWorker({
        pool,
        jobs: runtime.jobs,
        logger: silent,
        pollIntervalMs: 20,
        sweeper: false,
        retention: false,
        maxHandOffs,
      });
      await worker.start();
      await runtime.start(view, { id, input });
      const ended = await settled(runtime, id);
      await worker.stop();
      await runtime.close();
      await pool.end();
      expect(ended.status, ended.error ?? '').toBe('completed');
      return sent.filter(isLoad).length;
    };
    // Handed off: only the first step reads the saga. Not handed off: every step does.
    expect(await run('carried', 16)).toBe(1);
    expect(await run('read', 0)).toBe(3);
    const of = (id: string) =>
      seen
        .filter((s) => s.id === id)
        .map((s) => ({ ...s, id: undefined, view: s.view.replaceAll(id, '<id>') }));
    expect(of('carried')).toHaveLength(2);
    expect(of('carried')).toEqual(of('read'));
    const third = JSON.parse(of('carried')[1]!.view) as { steps: Record<string, unknown> };
    expect(Object.keys(third.steps.first as object)).toEqual(['ant', 'zebra']);
    expect(Object.keys(third.steps.second as object)).toEqual(['aa', 'bee']);
  });

  it('shows a step running, with its attempt and start time, while it runs', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let entered = false;
    const slow = defineSaga({ name: 'slow', version: 1, input: z.object({}) })
      .step('first', { ...fast, run: () => ({ ok: true }) })
      .step('wait-here', {
        ...fast,
        run: async () => {
          entered = true;
          await gate;
          return { done: true };
        },
      });
    const { runtime } = await startSagas(db.pool, [slow]);
    await runtime.start(slow, { id: 'slow-1', input: {} });
    await waitFor(() => entered, { what: 'the second step to start' });
    const during = (await runtime.getSaga('slow-1'))!;
    expect(during.history[1]).toMatchObject({ step: 'wait-here', status: 'running', attempts: 1 });
    expect(during.history[1]!.startedAt).not.toBeNull();
    expect(during.history[1]!.finishedAt).toBeNull();
    expect(during.history[1]!.jobId).toBe(during.currentJobId);
    expect(during.history[1]!.startedAt!.getTime()).toBeGreaterThanOrEqual(
      during.history[1]!.createdAt.getTime(),
    );
    // Shown from the saga's pointer and its job: the step's row is written only at its end.
    const rows = await db.pool.query(
      `SELECT step FROM skiplock.saga_steps WHERE saga_id = 'slow-1' ORDER BY id`,
    );
    expect(rows.rows).toEqual([{ step: 'first' }]);
    const listed = await runtime.listSagas({ name: 'slow', history: true });
    expect(listed.sagas[0]!.history).toEqual(during.history);
    release();
    const done = await settled(runtime, 'slow-1');
    expect(done.history[1]).toMatchObject({ status: 'completed', output: { done: true } });
    // While it ran, the start came from its job's claim; at its end the worker recorded when the
    // attempt began. Both are the database's clock, and the two readings are one claim apart.
    const drift = done.history[1]!.startedAt!.getTime() - during.history[1]!.startedAt!.getTime();
    expect(Math.abs(drift)).toBeLessThan(1_000);
    expect(done.history[1]!.finishedAt!.getTime()).toBeGreaterThanOrEqual(
      done.history[1]!.startedAt!.getTime(),
    );
  });

  it("moves the saga row's pointer with HOT updates, and writes each history row once", async () => {
    const hot = defineSaga({ name: 'hot', version: 1, input: z.object({}) })
      .step('a', { ...fast, run: () => 1 })
      .step('b', { ...fast, run: () => 2 })
      .step('c', { ...fast, run: () => 3 });
    const counters = async () =>
      (
        await db.pool.query<{ upd: number; hot: number; steps: number; stepIns: number }>(
          `SELECT n_tup_upd::int AS upd, n_tup_hot_upd::int AS hot,
                  (SELECT n_tup_upd::int FROM pg_stat_user_tables
                   WHERE relid = 'skiplock.saga_steps'::regclass) AS steps,
                  (SELECT n_tup_ins::int FROM pg_stat_user_tables
                   WHERE relid = 'skiplock.saga_steps'::regclass) AS "stepIns"
           FROM pg_stat_user_tables WHERE relid = 'skiplock.sagas'::regclass`,
        )
      ).rows[0]!;
    // Statistics reach the views when each backend flushes them (at most once a second).
    await db.pool.query('SELECT pg_stat_force_next_flush()');
    const before = await counters();
    // A pool of its own: closing it ends its backends, which flushes their statistics at once.
    const pool = db.newPool();
    const { runtime, worker } = await startSagas(pool, [hot]);
    const ids = ['hot-1', 'hot-2', 'hot-3'];
    for (const id of ids) await runtime.start(hot, { id, input: {} });
    for (const id of ids) expect((await settled(runtime, id)).status).toBe('completed');
    await worker.stop();
    await pool.end();
    // Per saga: three pointer moves (HOT) and the final status change (not HOT: status is indexed).
    let after = before;
    await waitFor(
      async () => {
        after = await counters();
        return after.upd - before.upd >= 4 * ids.length;
      },
      { what: 'the saga row updates to reach pg_stat_user_tables', timeoutMs: 10_000 },
    );
    expect(after.hot - before.hot).toBeGreaterThanOrEqual(3 * ids.length);
    // Each step's history row is written once, when the step ends: not when the saga reaches it
    // (an insert, then an update at its end) and not when an attempt starts (the job row shows
    // that; one more update per step).
    expect(after.stepIns - before.stepIns).toBe(3 * ids.length);
    expect(after.steps - before.steps).toBe(0);
  });

  it("records an attempt's error beside a transaction that holds the saga and writes the same row, without a deadlock", async () => {
    const one = defineSaga({ name: 'one', version: 1, input: z.object({}) }).step('x', {
      ...fast,
      run: () => 1,
    });
    // No worker: the saga stays on step x, whose history row does not exist yet.
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [one], logger: silent });
    await runtime.start(one, { id: 'race-1', input: {} });
    const holder = await db.pool.connect();
    try {
      // The dead job's hook: holds the saga, and ends the step failed (inserting its row).
      await holder.query('BEGIN');
      await runSql(holder, lockSaga('race-1'));
      // Meanwhile the attempt's own error record, on the pool, without the saga's lock.
      const attempt = { attempt: 1, startedAgoMs: 5 };
      const recorded = runSql(
        db.pool,
        recordAttemptError({ sagaId: 'race-1', step: 'x', kind: 'step', message: 'boom', attempt }),
      );
      // Let the record reach the database and block there, as it does in the race.
      await waitFor(
        async () =>
          (
            await db.pool.query(
              `SELECT 1 FROM pg_stat_activity
               WHERE wait_event_type = 'Lock' AND query LIKE '%saga_steps%'
                 AND datname = current_database()`,
            )
          ).rowCount === 1 || null,
        { what: 'the attempt error record to wait for the saga row' },
      );
      await runSql(
        holder,
        settleStep({ sagaId: 'race-1', step: 'x', kind: 'step', status: 'failed', error: 'dead' }),
      );
      await holder.query('COMMIT');
      // Before, the record inserted the row first and its foreign key check then waited for the
      // holder, whose insert of the same row waited for it: PostgreSQL aborted one (40P01).
      await recorded;
    } finally {
      holder.release();
    }
    const rows = await db.pool.query(
      `SELECT status::text, error FROM skiplock.saga_steps WHERE saga_id = 'race-1'`,
    );
    // The ended row stays as its end wrote it.
    expect(rows.rows).toEqual([{ status: 'failed', error: 'dead' }]);
    await runtime.close();
  });

  it("keeps a later attempt's error when an earlier attempt's error arrives after it, and takes the errors of a retried job's new attempts", async () => {
    const one = defineSaga({ name: 'one', version: 1, input: z.object({}) }).step('x', {
      ...fast,
      run: () => 1,
    });
    // No worker: the saga stays on step x, and the records below stand for its attempts' ends.
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [one], logger: silent });
    await runtime.start(one, { id: 'late-1', input: {} });
    const { rows: saga } = await db.pool.query<{ job: string }>(
      `SELECT current_job_id::text AS job FROM skiplock.sagas WHERE id = 'late-1'`,
    );
    // The step's job as its claims leave it: its attempt count (no worker runs it here).
    const claimed = (attempts: number) =>
      db.pool.query(`UPDATE skiplock.jobs SET attempts = $2 WHERE id = $1`, [
        saga[0]!.job,
        attempts,
      ]);
    const record = (attempt: number, message: string) =>
      runSql(
        db.pool,
        recordAttemptError({
          sagaId: 'late-1',
          step: 'x',
          kind: 'step',
          message,
          attempt: { attempt, startedAgoMs: 5 },
        }),
      );
    const row = async () =>
      (
        await db.pool.query(
          `SELECT status::text, attempts, error FROM skiplock.saga_steps WHERE saga_id = 'late-1'`,
        )
      ).rows;
    await claimed(2);
    await record(2, 'second attempt failed');
    // The first attempt's record, late (its worker slow to write it after a timeout).
    await record(1, 'first attempt failed');
    expect(await row()).toEqual([
      { status: 'running', attempts: 2, error: 'second attempt failed' },
    ]);
    // An operator's retry restarts the job's count: its new first attempt's error is written, and
    // the row keeps the most attempts any run made.
    await claimed(1);
    await record(1, 'first attempt after the retry failed');
    expect(await row()).toEqual([
      { status: 'running', attempts: 2, error: 'first attempt after the retry failed' },
    ]);
    await runtime.close();
  });
});
