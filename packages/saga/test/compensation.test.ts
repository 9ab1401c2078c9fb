import { NonRetryableError } from '@skiplock/queue';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSaga } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { fast, settled, startSagas, timeline } from './fixtures.js';
import { metricValue } from '../../../test/support/metrics.js';
import { waitFor } from '../../../test/support/wait.js';

const db = await useTestDatabase();

/** What each saga did, in order: `run:<step>` and `undo:<step>`. */
const effects = new Map<string, string[]>();
const note = (sagaId: string, what: string) => {
  effects.set(sagaId, [...(effects.get(sagaId) ?? []), what]);
};

const STEPS = ['reserve', 'validate', 'hold', 'notify', 'charge'] as const;
const failing = z.object({ failAt: z.enum(STEPS).nullable() });

function stepOf(name: (typeof STEPS)[number]) {
  return {
    ...fast,
    run: (ctx: { sagaId: string; input: { failAt: string | null } }) => {
      note(ctx.sagaId, `run:${name}`);
      if (ctx.input.failAt === name) throw new NonRetryableError(`${name} refused`);
      return { did: name };
    },
  };
}

function undoOf(name: string) {
  return (ctx: { sagaId: string }, output: { did: string }) => {
    expect(output).toEqual({ did: name });
    note(ctx.sagaId, `undo:${name}`);
  };
}

// reserve, hold and notify can be undone; validate has nothing to undo; charge is the pivot.
const saga = defineSaga({ name: 'positions', version: 1, input: failing })
  .step('reserve', { ...stepOf('reserve'), compensate: undoOf('reserve') })
  .step('validate', stepOf('validate'))
  .step('hold', { ...stepOf('hold'), compensate: undoOf('hold') })
  .step('notify', { ...stepOf('notify'), compensate: undoOf('notify') })
  .step('charge', { ...stepOf('charge'), pivot: true });

const undoable = new Set(['reserve', 'hold', 'notify']);

describe('failure at every step position', () => {
  it.each(STEPS.map((step, position) => ({ step, position })))(
    'a failure at $step ($position) compensates exactly the completed steps, in reverse',
    async ({ step, position }) => {
      const { runtime } = await startSagas(db.pool, [saga]);
      const id = `fail-at-${step}`;
      await runtime.start(saga, { id, input: { failAt: step } });
      const done = await settled(runtime, id);

      const completed = STEPS.slice(0, position);
      const undone = completed.filter((s) => undoable.has(s)).reverse();
      expect(done.status).toBe('compensated');
      expect(done.error).toBe(`step "${step}" failed: non_retryable: ${step} refused`);
      expect(effects.get(id)).toEqual([
        ...completed.map((s) => `run:${s}`),
        `run:${step}`,
        ...undone.map((s) => `undo:${s}`),
      ]);
      expect(timeline(done)).toEqual([
        ...completed.map((s) => `${s}:completed`),
        `${step}:failed`,
        ...undone.map((s) => `undo ${s}:completed`),
      ]);
    },
  );

  it('with no failure runs all five steps and undoes nothing', async () => {
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'no-fail', input: { failAt: null } });
    const done = await settled(runtime, 'no-fail');
    expect(done.status).toBe('completed');
    expect(effects.get('no-fail')).toEqual(STEPS.map((s) => `run:${s}`));
  });
});

describe('how a step fails for good', () => {
  it('retries a throwing step up to maxAttempts, then compensates', async () => {
    const runs: number[] = [];
    const retried = defineSaga({ name: 'retried', version: 1, input: z.object({}) })
      .step('a', { ...fast, run: () => 'a', compensate: (ctx) => note(ctx.sagaId, 'undo:a') })
      .step('b', {
        ...fast,
        maxAttempts: 3,
        run: (ctx) => {
          runs.push(ctx.attempt);
          throw new Error(`flaky ${ctx.attempt}`);
        },
      });
    const { runtime } = await startSagas(db.pool, [retried]);
    await runtime.start(retried, { id: 'r1', input: {} });
    const done = await settled(runtime, 'r1');
    expect(runs).toEqual([1, 2, 3]);
    expect(done.status).toBe('compensated');
    const b = done.history.find((h) => h.step === 'b')!;
    expect(b).toMatchObject({ status: 'failed', attempts: 3, error: 'max_attempts: flaky 3' });
    expect(effects.get('r1')).toEqual(['undo:a']);
  });

  it('counts a step timeout as a failed attempt and compensates when attempts run out', async () => {
    const timed = defineSaga({ name: 'timed', version: 1, input: z.object({}) })
      .step('a', { ...fast, run: () => 'a', compensate: (ctx) => note(ctx.sagaId, 'undo:a') })
      .step('slow', {
        ...fast,
        maxAttempts: 2,
        timeoutMs: 50,
        run: (ctx) =>
          new Promise((_, reject) =>
            ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)),
          ),
      });
    const { runtime } = await startSagas(db.pool, [timed]);
    await runtime.start(timed, { id: 't1', input: {} });
    const done = await settled(runtime, 't1');
    expect(done.status).toBe('compensated');
    const slow = done.history.find((h) => h.step === 'slow')!;
    expect(slow.status).toBe('failed');
    expect(slow.attempts).toBe(2);
    expect(slow.error).toMatch(/timed out after 50 ms/);
    expect(effects.get('t1')).toEqual(['undo:a']);
  });
});

describe('compensations', () => {
  it('retries a failing compensation until it succeeds', async () => {
    const attempts: number[] = [];
    const flaky = defineSaga({ name: 'flaky-undo', version: 1, input: z.object({}) })
      .step('a', {
        ...fast,
        run: () => ({ id: 'a1' }),
        compensate: (ctx, output) => {
          attempts.push(ctx.attempt);
          expect(ctx.idempotencyKey).toBe('saga:fu:compensate:a');
          expect(ctx.reason).toBe('step "b" failed: non_retryable: no');
          if (ctx.attempt < 3) throw new Error(`undo of ${output.id} failed`);
        },
        compensation: { ...fast, maxAttempts: 5 },
      })
      .step('b', {
        ...fast,
        run: () => {
          throw new NonRetryableError('no');
        },
      });
    const { runtime } = await startSagas(db.pool, [flaky]);
    await runtime.start(flaky, { id: 'fu', input: {} });
    const done = await settled(runtime, 'fu');
    expect(done.status).toBe('compensated');
    expect(attempts).toEqual([1, 2, 3]);
    expect(done.history.at(-1)).toMatchObject({
      step: 'a',
      kind: 'compensation',
      status: 'completed',
      attempts: 3,
    });
  });

  it('leaves the saga failed, with the error, when a compensation fails for good', async () => {
    const broken = defineSaga({ name: 'broken-undo', version: 1, input: z.object({}) })
      .step('a', { ...fast, run: () => 1, compensate: (ctx) => note(ctx.sagaId, 'undo:a') })
      .step('b', {
        ...fast,
        run: () => 2,
        compensate: () => {
          throw new Error('refund API is down');
        },
        compensation: { ...fast, maxAttempts: 2 },
      })
      .step('c', {
        ...fast,
        run: () => {
          throw new NonRetryableError('no');
        },
      });
    const { runtime } = await startSagas(db.pool, [broken]);
    await runtime.start(broken, { id: 'bu', input: {} });
    const done = await settled(runtime, 'bu');
    expect(done.status).toBe('failed');
    expect(done.error).toBe('compensation of "b" failed: max_attempts: refund API is down');
    expect(timeline(done)).toEqual(['a:completed', 'b:completed', 'c:failed', 'undo b:failed']);
    // The operator decides; `a` is not undone behind the failed compensation's back.
    expect(effects.get('bu')).toBeUndefined();
    expect(
      await metricValue(runtime.metrics, 'skiplock_saga_outcomes_total', {
        saga: broken.name,
        step: 'b',
        outcome: 'failed',
      }),
    ).toBe(1);
  });
});

describe('pivot and retriable steps', () => {
  it('retries retriable steps after the pivot until they succeed, never compensating', async () => {
    let shipAttempts = 0;
    const pivoting = defineSaga({ name: 'pivoting', version: 1, input: z.object({}) })
      .step('reserve', { ...fast, run: () => 1, compensate: (ctx) => note(ctx.sagaId, 'undo') })
      .step('charge', { ...fast, pivot: true, run: () => 2 })
      .step('ship', {
        ...fast,
        retriable: true,
        run: () => {
          shipAttempts += 1;
          if (shipAttempts < 7) throw new Error('carrier busy');
          return 3;
        },
      });
    const { runtime } = await startSagas(db.pool, [pivoting]);
    await runtime.start(pivoting, { id: 'pv', input: {} });
    const done = await settled(runtime, 'pv');
    expect(done.status).toBe('completed');
    expect(shipAttempts).toBe(7);
    expect(done.history.find((h) => h.step === 'ship')?.attempts).toBe(7);
    expect(effects.get('pv')).toBeUndefined();
  });

  it('compensates when the pivot itself fails, and fails the saga past the pivot', async () => {
    const pivotFails = defineSaga({ name: 'pivot-fails', version: 1, input: z.object({}) })
      .step('reserve', { ...fast, run: () => 1, compensate: (ctx) => note(ctx.sagaId, 'undo') })
      .step('charge', {
        ...fast,
        pivot: true,
        run: () => {
          throw new NonRetryableError('declined');
        },
      });
    const afterPivot = defineSaga({ name: 'after-pivot', version: 1, input: z.object({}) })
      .step('reserve', { ...fast, run: () => 1, compensate: (ctx) => note(ctx.sagaId, 'undo') })
      .step('charge', { ...fast, pivot: true, run: () => 2 })
      .step('ship', {
        ...fast,
        retriable: true,
        run: () => {
          throw new NonRetryableError('address does not exist');
        },
      });
    const { runtime } = await startSagas(db.pool, [pivotFails, afterPivot]);
    await runtime.start(pivotFails, { id: 'pf', input: {} });
    await runtime.start(afterPivot, { id: 'ap', input: {} });
    expect((await settled(runtime, 'pf')).status).toBe('compensated');
    expect(effects.get('pf')).toEqual(['undo']);
    const ap = await settled(runtime, 'ap');
    expect(ap.status).toBe('failed');
    expect(ap.error).toBe(
      'step "ship" failed after the pivot: non_retryable: address does not exist',
    );
    expect(effects.get('ap')).toBeUndefined();
  });
});

// Found by an audit: a saga with a retriable step and no pivot compensated on the retriable
// step's failure, took a cancel after it and let a wait after it time out into compensation,
// though the definition rules (and the graph) make the first retriable step its point of no
// return. Each case below compensated `reserve` before the fix.
describe('a retriable step without a pivot', () => {
  const reserve = {
    ...fast,
    run: () => 1,
    compensate: (ctx: { sagaId: string }) => note(ctx.sagaId, 'undo'),
  };

  it('fails the saga, undoes nothing, and retryFailed runs the step again', async () => {
    let refuse = true;
    const saga = defineSaga({ name: 'rnp-fail', version: 1, input: z.object({}) })
      .step('reserve', reserve)
      .step('ship', {
        ...fast,
        retriable: true,
        run: () => {
          if (refuse) throw new NonRetryableError('address does not exist');
          return { shipped: true };
        },
      });
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'rnp-fail', input: {} });
    const failed = await settled(runtime, 'rnp-fail');
    expect(failed.status).toBe('failed');
    expect(failed.error).toBe(
      'step "ship" failed past the first retriable step: non_retryable: address does not exist',
    );
    expect(effects.get('rnp-fail')).toBeUndefined();
    refuse = false;
    expect(await runtime.retryFailed('rnp-fail')).toMatchObject({ retried: true, step: 'ship' });
    expect((await settled(runtime, 'rnp-fail')).status).toBe('completed');
    expect(effects.get('rnp-fail')).toBeUndefined();
  });

  it('still compensates for a deadline that passed before the saga reached the retriable step', async () => {
    let shipped = false;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    const saga = defineSaga({
      name: 'rnp-deadline',
      version: 1,
      input: z.object({}),
      deadlineMs: 60_000,
    })
      .step('reserve', {
        ...fast,
        run: async () => {
          started();
          await gate;
          return 1;
        },
        compensate: (ctx: { sagaId: string }) => note(ctx.sagaId, 'undo'),
      })
      .step('ship', { ...fast, retriable: true, run: () => void (shipped = true) });
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'rnp-deadline', input: {} });
    await running;
    // The deadline passes while `reserve` runs (its own timer, set from the minute it had, has
    // not fired): found in review, the saga set pivoted on its way to `ship` and shipped.
    await db.pool.query(
      `UPDATE skiplock.sagas SET deadline = now() - interval '1 second' WHERE id = 'rnp-deadline'`,
    );
    release();
    expect((await settled(runtime, 'rnp-deadline')).status).toBe('compensated');
    expect(effects.get('rnp-deadline')).toEqual(['undo']);
    expect(shipped).toBe(false);
  });

  it('does not start a queued saga past its first retriable step once its deadline passed', async () => {
    const shipped: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const saga = defineSaga({
      name: 'rnp-queued',
      version: 1,
      input: z.object({}),
      deadlineMs: 60_000,
      lockKey: () => 'one-at-a-time',
    }).step('ship', {
      ...fast,
      retriable: true,
      run: async (ctx) => {
        shipped.push(ctx.sagaId);
        if (ctx.sagaId === 'rnp-q1') await gate;
      },
    });
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'rnp-q1', input: {} });
    await waitFor(() => shipped.length === 1, { what: 'the first saga to ship' });
    expect(await runtime.start(saga, { id: 'rnp-q2', input: {} })).toMatchObject({
      status: 'queued',
    });
    // Its deadline passes while it waits for the key (found in review: it then shipped).
    await db.pool.query(
      `UPDATE skiplock.sagas SET deadline = now() - interval '1 second' WHERE id = 'rnp-q2'`,
    );
    release();
    expect((await settled(runtime, 'rnp-q1')).status).toBe('completed');
    expect((await settled(runtime, 'rnp-q2')).status).toBe('compensated');
    expect(shipped).toEqual(['rnp-q1']);
  });

  it('refuses a cancel once the saga reached the retriable step', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    const saga = defineSaga({ name: 'rnp-cancel', version: 1, input: z.object({}) })
      .step('reserve', reserve)
      .step('ship', {
        ...fast,
        retriable: true,
        run: async () => {
          started();
          await gate;
          return { shipped: true };
        },
      });
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'rnp-cancel', input: {} });
    await running;
    const cancel = await runtime.cancel('rnp-cancel');
    release();
    expect(cancel).toMatchObject({ accepted: false, reason: 'pivoted' });
    expect((await settled(runtime, 'rnp-cancel')).status).toBe('completed');
    expect(effects.get('rnp-cancel')).toBeUndefined();
  });

  it('fails the saga when a wait after it times out, and a first retriable step starts past it', async () => {
    const wait = defineSaga({ name: 'rnp-wait', version: 1, input: z.object({}) })
      .step('reserve', reserve)
      .step('ship', { ...fast, retriable: true, run: () => ({ shipped: true }) })
      .waitFor('delivered', { payload: z.object({}), timeoutMs: 200 });
    const first = defineSaga({ name: 'rnp-first', version: 1, input: z.object({}) }).step('ship', {
      ...fast,
      retriable: true,
      run: () => {
        throw new NonRetryableError('address does not exist');
      },
    });
    const { runtime } = await startSagas(db.pool, [wait, first]);
    await runtime.start(wait, { id: 'rnp-wait', input: {} });
    await runtime.start(first, { id: 'rnp-first', input: {} });
    const waited = await settled(runtime, 'rnp-wait');
    expect(waited.status).toBe('failed');
    expect(waited.error).toMatch(/^step "delivered" failed past the first retriable step: signal/);
    expect(effects.get('rnp-wait')).toBeUndefined();
    // Nothing to undo either way, but it ends failed (retryable), not compensated.
    expect((await settled(runtime, 'rnp-first')).status).toBe('failed');
  });
});

// Found by an audit: the compensation's failure replaced why the saga compensated, and a retry
// cleared it, so the compensations after the retry read `compensating` and a cancelled saga
// ended with no error.
describe('retryFailed of a failed compensation', () => {
  function sagaWith(name: string, last: () => unknown) {
    const reasons: string[] = [];
    const broken = { on: true };
    const saga = defineSaga({ name, version: 1, input: z.object({}) })
      .step('one', {
        ...fast,
        run: () => 1,
        compensate: (ctx) => void reasons.push(`one:${ctx.reason}`),
      })
      .step('two', {
        ...fast,
        run: () => 2,
        compensation: { maxAttempts: 1 },
        compensate: (ctx) => {
          reasons.push(`two:${ctx.reason}`);
          if (broken.on) throw new NonRetryableError('ledger down');
        },
      })
      .step('three', { ...fast, run: last });
    return { saga, reasons, broken };
  }

  it('gives the compensations after it the step failure the saga compensates for', async () => {
    const { saga, reasons, broken } = sagaWith('retry-reason-failure', () => {
      throw new NonRetryableError('card declined');
    });
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'rr-failure', input: {} });
    expect((await settled(runtime, 'rr-failure')).status).toBe('failed');
    broken.on = false;
    expect(await runtime.retryFailed('rr-failure')).toMatchObject({ retried: true });
    const done = await settled(runtime, 'rr-failure');
    const why = 'step "three" failed: non_retryable: card declined';
    expect(reasons).toEqual([`two:${why}`, `two:${why}`, `one:${why}`]);
    expect(done).toMatchObject({ status: 'compensated', error: why });
  });

  it('keeps a cancel the reason, and the cancelled saga its error', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    const { saga, reasons, broken } = sagaWith('retry-reason-cancel', async () => {
      started();
      await gate;
      return 3;
    });
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'rr-cancel', input: {} });
    await running;
    expect(await runtime.cancel('rr-cancel')).toMatchObject({ accepted: true });
    release();
    expect((await settled(runtime, 'rr-cancel')).status).toBe('failed');
    broken.on = false;
    expect(await runtime.retryFailed('rr-cancel')).toMatchObject({ retried: true });
    const done = await settled(runtime, 'rr-cancel');
    expect(reasons).toEqual(['two:cancelled', 'two:cancelled', 'one:cancelled']);
    expect(done).toMatchObject({ status: 'cancelled', error: 'cancelled' });
  });
});
