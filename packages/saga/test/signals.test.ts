import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createSagaRuntime, defineSaga, SagaValidationError, type SagaView } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { fast, settled, silent, startSagas, timeline } from './fixtures.js';

const db = await useTestDatabase();

const undone: string[] = [];
const approval = defineSaga({ name: 'approval', version: 1, input: z.object({ n: z.number() }) })
  .step('request', {
    ...fast,
    run: (ctx) => ({ ticket: `t-${ctx.input.n}` }),
    compensate: (ctx, output) => {
      undone.push(`${ctx.sagaId}:${output.ticket}`);
    },
  })
  .waitFor('approved', {
    signal: 'approval',
    payload: z.object({ by: z.string(), level: z.number().int().default(1) }),
    timeoutMs: 30_000,
  })
  .step('apply', {
    ...fast,
    run: (ctx) => ({ applied: `${ctx.steps.request.ticket} by ${ctx.steps.approved.by}` }),
  });

/** A request, then a wait for `answer` of `timeoutMs`. */
const waitingFor = (name: string, timeoutMs: number) =>
  defineSaga({ name, version: 1, input: z.object({}) })
    .step('request', { ...fast, run: () => 1, compensate: (ctx) => void undone.push(ctx.sagaId) })
    .waitFor('answer', { payload: z.object({ ok: z.boolean() }), timeoutMs })
    .step('after', { ...fast, run: () => 2 });
const impatient = waitingFor('impatient', 100);

/** A saga of `waitingFor` whose wait timed out: the wait failed and the request was undone. */
function expectTimedOut(done: SagaView, timeoutMs = 100) {
  expect(done.status).toBe('compensated');
  expect(done.error).toBe(
    `step "answer" failed: signal "answer" did not arrive within ${timeoutMs} ms`,
  );
  expect(timeline(done)).toEqual(['request:completed', 'answer:failed', 'undo request:completed']);
}

describe('waiting for a signal', () => {
  it('resumes when the signal arrives after the wait started', async () => {
    const { runtime } = await startSagas(db.pool, [approval]);
    await runtime.start(approval, { id: 'late', input: { n: 1 } });
    const waiting = await settled(runtime, 'late', ['waiting']);
    expect(waiting.currentStep).toBe('approved');
    expect(timeline(waiting)).toEqual(['request:completed', 'approved:waiting']);

    expect(await runtime.signal('late', 'approval', { by: 'ann' })).toEqual({
      delivered: true,
      resumed: true,
    });
    const done = await settled(runtime, 'late');
    expect(done.status).toBe('completed');
    expect(done.history.find((h) => h.step === 'approved')?.output).toEqual({
      by: 'ann',
      level: 1,
    });
    expect(done.history.at(-1)?.output).toEqual({ applied: 't-1 by ann' });
    expect(done.signals).toMatchObject([{ name: 'approval', payload: { by: 'ann' } }]);
    expect(done.signals[0]?.consumedAt).not.toBeNull();
  });

  it('takes a signal that arrived before the wait started', async () => {
    // No worker yet: the saga starts and gets its signal before its wait step ever runs.
    const early = createSagaRuntime({ pool: db.pool, sagas: [approval], logger: silent });
    await early.start(approval, { id: 'early', input: { n: 2 } });
    expect(await early.signal('early', 'approval', { by: 'bob', level: 2 })).toEqual({
      delivered: true,
      resumed: false,
    });
    expect((await early.getSaga('early'))?.currentStep).toBe('request');
    await early.close();
    const { runtime } = await startSagas(db.pool, [approval]);
    const done = await settled(runtime, 'early');
    expect(done.status).toBe('completed');
    expect(done.history.at(-1)?.output).toEqual({ applied: 't-2 by bob' });
  });

  it('delivers a signal once: a second delivery is ignored', async () => {
    const { runtime } = await startSagas(db.pool, [approval]);
    await runtime.start(approval, { id: 'twice', input: { n: 3 } });
    await settled(runtime, 'twice', ['waiting']);
    const results = await Promise.all([
      runtime.signal('twice', 'approval', { by: 'first' }),
      runtime.signal('twice', 'approval', { by: 'second' }),
    ]);
    expect(results.filter((r) => r.delivered)).toHaveLength(1);
    const done = await settled(runtime, 'twice');
    expect(done.status).toBe('completed');
    expect(done.history.filter((h) => h.step === 'apply')).toHaveLength(1);
    expect(await runtime.signal('twice', 'approval', { by: 'third' })).toEqual({
      delivered: false,
      resumed: false,
    });
  });

  it('refuses an invalid payload, naming the field, and an unknown signal', async () => {
    const { runtime } = await startSagas(db.pool, [approval]);
    await runtime.start(approval, { id: 'bad', input: { n: 4 } });
    const error = await runtime.signal('bad', 'approval', { by: 7 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SagaValidationError);
    expect((error as SagaValidationError).code).toBe('invalid_signal');
    expect((error as Error).message).toMatch(/payload\.by: /);
    await expect(runtime.signal('bad', 'nope', {})).rejects.toThrow(
      'saga "approval" version 1 waits for no signal "nope" (it waits for: approval)',
    );
    await expect(runtime.signal('missing', 'approval', { by: 'x' })).rejects.toThrow(
      'saga "missing" does not exist',
    );
  });

  it('counts a signal timeout as a failure of the wait step and compensates', async () => {
    const { runtime } = await startSagas(db.pool, [impatient]);
    await runtime.start(impatient, { id: 'timeout', input: {} });
    const done = await settled(runtime, 'timeout');
    expectTimedOut(done);
    expect(undone).toContain('timeout');
    // A signal after the timeout is stored but moves nothing.
    expect(await runtime.signal('timeout', 'answer', { ok: true })).toEqual({
      delivered: true,
      resumed: false,
    });
    expect((await runtime.getSaga('timeout'))?.status).toBe('compensated');
  });

  it('leaves a signal after the timeout to the timeout job, even before that job has run', async () => {
    // Long enough for the worker to stop before its timeout job comes due, even on a loaded run.
    const patient = waitingFor('patient', 1_500);
    const { runtime, worker } = await startSagas(db.pool, [patient]);
    await runtime.start(patient, { id: 'overdue', input: {} });
    await settled(runtime, 'overdue', ['waiting']);
    // No worker runs the timeout job: the wait's 1.5 s pass with the saga still waiting.
    await worker.stop();
    await waitFor(
      async () => {
        const { rows } = await db.pool.query(
          `SELECT 1 FROM skiplock.jobs WHERE idempotency_key = 'saga:overdue:timeout:answer'
              AND status = 'pending' AND run_at <= clock_timestamp()`,
        );
        return rows.length === 1;
      },
      { what: 'the timeout job to come due' },
    );
    expect((await runtime.getSaga('overdue'))?.status).toBe('waiting');
    expect(await runtime.signal('overdue', 'answer', { ok: true })).toEqual({
      delivered: true,
      resumed: false,
    });
    const { runtime: later } = await startSagas(db.pool, [patient]);
    const done = await settled(later, 'overdue');
    expectTimedOut(done, 1_500);
    expect(done.signals).toMatchObject([{ name: 'answer', consumedAt: null }]);
  });

  it('joins the caller transaction: a rolled-back signal was never delivered', async () => {
    const { runtime } = await startSagas(db.pool, [approval]);
    await runtime.start(approval, { id: 'tx', input: { n: 5 } });
    await settled(runtime, 'tx', ['waiting']);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await runtime.signal('tx', 'approval', { by: 'ghost' }, { tx: client });
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    const still = await runtime.getSaga('tx');
    expect(still?.status).toBe('waiting');
    expect(still?.signals).toEqual([]);
    await runtime.signal('tx', 'approval', { by: 'real' });
    expect((await settled(runtime, 'tx')).status).toBe('completed');
  });
});
