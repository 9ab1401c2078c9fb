import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createSagaRuntime, defineSaga } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { fast, settled, silent, startSagas, timeline } from './fixtures.js';

const db = await useTestDatabase();

const undone: string[] = [];
/** Steps that block until the test opens their gate, by saga id. */
const gates = new Map<string, () => void>();
const gate = (id: string) => new Promise<void>((resolve) => gates.set(id, resolve));

const trip = defineSaga({ name: 'trip', version: 1, input: z.object({ block: z.boolean() }) })
  .step('flight', {
    ...fast,
    run: () => ({ seat: '1A' }),
    compensate: (ctx, out) => void undone.push(`${ctx.sagaId}:flight:${out.seat}`),
  })
  .step('hotel', {
    ...fast,
    run: async (ctx) => {
      if (ctx.input.block) await gate(ctx.sagaId);
      return { room: 12 };
    },
    compensate: (ctx, out) => void undone.push(`${ctx.sagaId}:hotel:${out.room}`),
  })
  .waitFor('paid', { payload: z.object({}) })
  .step('confirm', { ...fast, pivot: true, run: () => true });

describe('cancel', () => {
  it('compensates a saga waiting for a signal and ends it cancelled', async () => {
    const { runtime } = await startSagas(db.pool, [trip]);
    await runtime.start(trip, { id: 'c-wait', input: { block: false } });
    await settled(runtime, 'c-wait', ['waiting']);
    expect(await runtime.cancel('c-wait')).toEqual({ accepted: true, status: 'compensating' });
    const done = await settled(runtime, 'c-wait');
    expect(done.status).toBe('cancelled');
    expect(done.error).toBe('cancelled');
    expect(timeline(done)).toEqual([
      'flight:completed',
      'hotel:completed',
      'paid:cancelled',
      'undo hotel:completed',
      'undo flight:completed',
    ]);
    expect(undone.filter((u) => u.startsWith('c-wait'))).toEqual([
      'c-wait:hotel:12',
      'c-wait:flight:1A',
    ]);
  });

  it('cancels a step that has not started: its job is cancelled and it never runs', async () => {
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [trip], logger: silent });
    await runtime.start(trip, { id: 'c-queued', input: { block: false } });
    expect(await runtime.cancel('c-queued')).toEqual({ accepted: true, status: 'cancelled' });
    const saga = await runtime.getSaga('c-queued');
    expect(timeline(saga!)).toEqual(['flight:cancelled']);
    expect(saga?.status).toBe('cancelled');
    const job = await db.pool.query(`SELECT status FROM skiplock.jobs WHERE id = $1`, [
      saga!.history[0]!.jobId,
    ]);
    expect(job.rows[0].status).toBe('cancelled');
    expect(await runtime.cancel('c-queued')).toEqual({
      accepted: false,
      status: 'cancelled',
      reason: 'finished',
    });
    await runtime.close();
  });

  it('lets a running step finish, then compensates it too', async () => {
    const { runtime } = await startSagas(db.pool, [trip]);
    await runtime.start(trip, { id: 'c-run', input: { block: true } });
    await waitFor(() => gates.has('c-run'), { what: 'hotel step to run' });
    expect(await runtime.cancel('c-run')).toEqual({ accepted: true, status: 'running' });
    expect((await runtime.getSaga('c-run'))?.cancelRequested).toBe(true);
    gates.get('c-run')!();
    const done = await settled(runtime, 'c-run');
    expect(done.status).toBe('cancelled');
    expect(timeline(done)).toEqual([
      'flight:completed',
      'hotel:completed',
      'undo hotel:completed',
      'undo flight:completed',
    ]);
  });

  it('stops a handed-off pivot cancelled between its hand-off and its start', async () => {
    const charged: string[] = [];
    const billing = defineSaga({ name: 'late-cancel', version: 1, input: z.object({}) })
      .step('prepare', {
        ...fast,
        run: () => 'ready',
        compensate: (ctx) => void undone.push(`${ctx.sagaId}:prepare`),
      })
      .step('charge', {
        ...fast,
        pivot: true,
        run: (ctx) => void charged.push(ctx.sagaId),
      });
    const { runtime, worker } = await startSagas(db.pool, [billing]);
    const canceller = await db.pool.connect();
    const handedOff: string[] = [];
    worker.on('job:claimed', (event) => {
      if (event.jobType !== 'saga:late-cancel:v1:charge') return;
      handedOff.push(event.jobId);
      // The pivot's job was just handed to this worker as the step before it committed. A
      // cancel commits now, before the pivot starts: the flag as cancel() sets it for a running
      // step, sent at once, and this process held still while the server commits it.
      void canceller.query(
        `UPDATE skiplock.sagas SET cancel_requested = true, error = 'cancelled' WHERE id = 'lc-1'`,
      );
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 300);
    });
    try {
      await runtime.start(billing, { id: 'lc-1', input: {} });
      const done = await settled(runtime, 'lc-1');
      expect(handedOff).toHaveLength(1);
      // Before: the pivot ran from the carried snapshot, the cancel was ignored (completed).
      expect(charged).toEqual([]);
      expect(done.status).toBe('cancelled');
      expect(timeline(done)).toEqual([
        'prepare:completed',
        'charge:cancelled',
        'undo prepare:completed',
      ]);
      expect(undone).toContain('lc-1:prepare');
    } finally {
      canceller.release();
    }
  });

  it('with lockWaitMs, an action on a saga another transaction holds fails saga_busy, changing nothing', async () => {
    const { runtime } = await startSagas(db.pool, [trip]);
    await runtime.start(trip, { id: 'c-held', input: { block: false } });
    await settled(runtime, 'c-held', ['waiting']);
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM skiplock.sagas WHERE id = 'c-held' FOR UPDATE`);
      // Bounded so that an action waiting for the held row fails the test instead of hanging it.
      const bound = <T>(work: Promise<T>) =>
        Promise.race([
          work,
          new Promise<never>((_, reject) =>
            setTimeout(() => reject(new Error('waited for the held saga')), 5_000),
          ),
        ]);
      const busy = {
        code: 'saga_busy',
        message: expect.stringMatching(/c-held.*waited 200 ms for it/),
      };
      await expect(bound(runtime.cancel('c-held', { lockWaitMs: 200 }))).rejects.toMatchObject(
        busy,
      );
      await expect(bound(runtime.retryFailed('c-held', { lockWaitMs: 200 }))).rejects.toMatchObject(
        busy,
      );
      await expect(
        bound(runtime.signal('c-held', 'paid', {}, { lockWaitMs: 200 })),
      ).rejects.toMatchObject(busy);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    const saga = await runtime.getSaga('c-held');
    expect(saga).toMatchObject({ status: 'waiting', cancelRequested: false });
    await expect(runtime.cancel('c-held', { lockWaitMs: 0 })).rejects.toMatchObject({
      code: 'invalid_config',
      message: expect.stringMatching(/lockWaitMs/),
    });
    await expect(
      runtime.signal('c-held', 'paid', {}, { tx: db.pool, lockWaitMs: 200 }),
    ).rejects.toMatchObject({ code: 'invalid_config', message: expect.stringMatching(/tx/) });
    // Once the row is free the bounded action goes through: the signal was not stored before.
    expect(await runtime.signal('c-held', 'paid', {}, { lockWaitMs: 200 })).toEqual({
      delivered: true,
      resumed: true,
    });
    expect((await settled(runtime, 'c-held')).status).toBe('completed');
  });

  it('refuses to cancel once the pivot completed', async () => {
    const { runtime } = await startSagas(db.pool, [trip]);
    await runtime.start(trip, { id: 'c-late', input: { block: false } });
    await settled(runtime, 'c-late', ['waiting']);
    await runtime.signal('c-late', 'paid', {});
    await settled(runtime, 'c-late');
    expect(await runtime.cancel('c-late')).toEqual({
      accepted: false,
      status: 'completed',
      reason: 'finished',
    });
    await expect(runtime.cancel('c-none')).rejects.toThrow('saga "c-none" does not exist');
  });
});

describe('saga deadline', () => {
  const slow = defineSaga({
    name: 'slow',
    version: 1,
    input: z.object({ wait: z.boolean() }),
    // The start, `prepare` and the wait's start must fit in it for the wait to be what it ends.
    deadlineMs: 3_000,
  })
    .step('prepare', {
      ...fast,
      run: () => 'ready',
      compensate: (ctx) => void undone.push(`${ctx.sagaId}:prepare`),
    })
    .waitFor('go', { payload: z.object({}) })
    .step('work', {
      ...fast,
      run: (ctx) =>
        new Promise((resolve) => {
          // Honours its signal: the deadline aborts it.
          ctx.signal.addEventListener('abort', () => resolve('aborted'));
        }),
    });

  it('aborts a running step at the deadline and compensates', async () => {
    const { runtime } = await startSagas(db.pool, [slow]);
    await runtime.start(slow, { id: 'd-run', input: { wait: false }, deadlineMs: 60_000 });
    await settled(runtime, 'd-run', ['waiting']);
    // The deadline comes due while `work` runs (or, on a slow machine, before it starts).
    await db.pool.query(
      `UPDATE skiplock.sagas SET deadline = now() + interval '200 milliseconds' WHERE id = 'd-run'`,
    );
    await runtime.signal('d-run', 'go', {});
    const done = await settled(runtime, 'd-run');
    expect(done.status).toBe('compensated');
    expect(done.error).toBe('step "work" failed: deadline exceeded');
    expect(timeline(done)).toEqual([
      'prepare:completed',
      'go:completed',
      'work:failed',
      'undo prepare:completed',
    ]);
  });

  it('ends a wait at the deadline and compensates', async () => {
    const { runtime } = await startSagas(db.pool, [slow]);
    await runtime.start(slow, { id: 'd-wait', input: { wait: true } });
    const done = await settled(runtime, 'd-wait');
    expect(done.status).toBe('compensated');
    expect(done.error).toBe('step "go" failed: deadline exceeded while waiting for signal "go"');
    expect(undone).toContain('d-wait:prepare');
  });

  it('shows the running step from its job, and counts the attempt the deadline cut off', async () => {
    const cut = defineSaga({ name: 'cut', version: 1, input: z.object({}), deadlineMs: 3_000 })
      .step('first', { ...fast, run: () => 1, compensate: () => {} })
      .step('long', {
        ...fast,
        run: (ctx) => new Promise((resolve) => ctx.signal.addEventListener('abort', resolve)),
      });
    const { runtime } = await startSagas(db.pool, [cut]);
    await runtime.start(cut, { id: 'd-cut', input: {} });
    // Nothing is written when the attempt starts; the history shows it from the job row.
    await waitFor(async () => (await runtime.getSaga('d-cut'))!.history[1]?.status === 'running', {
      what: 'step "long" shown running',
    });
    const during = (await runtime.getSaga('d-cut'))!.history[1]!;
    expect(during).toMatchObject({ step: 'long', attempts: 1 });
    expect(during.startedAt).toBeInstanceOf(Date);
    const done = await settled(runtime, 'd-cut');
    expect(done.status).toBe('compensated');
    const long = done.history[1]!;
    expect(long).toMatchObject({ status: 'failed', error: 'deadline exceeded', attempts: 1 });
    expect(long.startedAt!.getTime()).toBeLessThanOrEqual(long.finishedAt!.getTime());
    expect(long.startedAt!.getTime()).toBeGreaterThanOrEqual(long.createdAt.getTime());
  });

  it('fails a step that starts after the deadline, before it runs', async () => {
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [slow], logger: silent });
    await runtime.start(slow, { id: 'd-start', input: { wait: false }, deadlineMs: 1 });
    await db.pool.query(`SELECT pg_sleep(0.01)`);
    const { runtime: working } = await startSagas(db.pool, [slow]);
    const done = await settled(working, 'd-start');
    expect(done.status).toBe('compensated');
    expect(timeline(done)).toEqual(['prepare:failed']);
    expect(done.history[0]).toMatchObject({ error: 'deadline exceeded', attempts: 0 });
    await runtime.close();
  });
});
