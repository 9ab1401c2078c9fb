import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSaga, readSaga, readSagas } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { fast, startSagas } from './fixtures.js';

const db = await useTestDatabase();

/**
 * Runs `between` once, when the first statement that reads the sagas table has been answered
 * (through the pool's own queries and every client it connects from now on; a `pool.query` with
 * a callback runs it as soon as that statement is sent): whatever commits there lands between a
 * view's first statement and the rest.
 */
function pauseAfterSagaRead(pool: pg.Pool, between: () => Promise<void>): void {
  let pending: (() => Promise<void>) | null = between;
  const hook = (target: { query: (...args: never[]) => unknown }) => {
    const original = target.query.bind(target) as (...args: unknown[]) => Promise<unknown>;
    Object.assign(target, {
      query: async (...args: unknown[]) => {
        const result = await original(...args);
        const first = args[0];
        const text = typeof first === 'string' ? first : (first as { text?: string }).text;
        if (pending && text?.includes('FROM skiplock.sagas')) {
          const run = pending;
          pending = null;
          await run();
        }
        return result;
      },
    });
  };
  hook(pool);
  pool.on('connect', hook);
}

function gate(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe('a saga read while a step ends', () => {
  const gates = { a: gate(), b: gate() };
  const started = new Set<string>();
  const twoSteps = defineSaga({ name: 'two-steps', version: 1, input: z.object({}) })
    .step('a', {
      ...fast,
      run: async () => {
        started.add('a');
        await gates.a.promise;
        return {};
      },
    })
    .step('b', {
      ...fast,
      run: async () => {
        started.add('b');
        await gates.b.promise;
        return {};
      },
    });

  /** Step `a` finishes and `b` starts: what commits between the view's statements. */
  const moveOn = (id: string) => async () => {
    gates.a.resolve();
    await waitFor(async () => {
      const { rows } = await db.pool.query<{ current_step: string }>(
        'SELECT current_step FROM skiplock.sagas WHERE id = $1',
        [id],
      );
      return rows[0]?.current_step === 'b' && started.has('b');
    });
  };

  it('shows one moment: the step it is on has not finished in its history', async () => {
    const { runtime } = await startSagas(db.pool, [twoSteps]);
    await runtime.start(twoSteps, { id: 'snap-1', input: {} });
    await waitFor(() => started.has('a'), { what: 'step a to start' });
    const pool = db.newPool(2);
    pauseAfterSagaRead(pool, moveOn('snap-1'));
    const view = await readSaga(pool, 'snap-1');
    // Read as of its first statement: on `a`, `a` running, nothing of `b`. Read statement by
    // statement, it showed `a` pending under a saga on `a` (its job, read last, had completed);
    // a list with histories showed `a` completed.
    expect(view?.currentStep).toBe('a');
    expect(view?.history.map((h) => `${h.step}:${h.status}`)).toEqual(['a:running']);
    // The next read sees the moment after.
    const after = await readSaga(db.pool, 'snap-1');
    expect(after?.currentStep).toBe('b');
    expect(after?.history.map((h) => `${h.step}:${h.status}`)).toEqual([
      'a:completed',
      'b:running',
    ]);
    gates.b.resolve();
  });

  it('a list with histories shows each saga as of one moment too', async () => {
    Object.assign(gates, { a: gate(), b: gate() });
    started.clear();
    const { runtime } = await startSagas(db.pool, [twoSteps]);
    await runtime.start(twoSteps, { id: 'snap-2', input: {} });
    await waitFor(() => started.has('a'), { what: 'step a to start' });
    const pool = db.newPool(2);
    pauseAfterSagaRead(pool, moveOn('snap-2'));
    const { sagas } = await readSagas(pool, { name: 'two-steps', history: true });
    const saga = sagas.find((s) => s.id === 'snap-2');
    expect(saga?.currentStep).toBe('a');
    expect(saga?.history?.map((h) => `${h.step}:${h.status}`)).toEqual(['a:running']);
    gates.b.resolve();
  });
});
