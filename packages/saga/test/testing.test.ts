import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSaga } from '../src/index.js';
import { checkSagaCrashes } from '../src/testing.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { fast } from './fixtures.js';

const db = await useTestDatabase();

describe('checkSagaCrashes', () => {
  it('fails or crashes a well-built saga at every step; every run ends as it should', async () => {
    // Effects keyed by the step's idempotency key, so a re-run after a crash repeats nothing.
    const effects = new Map<string, number>();
    const effect = (key: string) => effects.set(key, (effects.get(key) ?? 0) + 1);
    const order = defineSaga({ name: 'checked', version: 1, input: z.object({ sku: z.string() }) })
      .step('reserve', {
        ...fast,
        run: (ctx) => (effect(ctx.idempotencyKey), { id: `r-${ctx.input.sku}` }),
        compensate: (ctx) => void effect(ctx.idempotencyKey),
        compensation: fast,
      })
      .step('check', { ...fast, run: () => true })
      .step('hold', {
        ...fast,
        run: (ctx) => (effect(ctx.idempotencyKey), { hold: ctx.steps.reserve.id }),
        compensate: (ctx) => void effect(ctx.idempotencyKey),
        compensation: fast,
      })
      .waitFor('approved', { payload: z.object({ ok: z.literal(true) }) })
      .step('charge', { ...fast, pivot: true, run: () => 'charged' })
      .step('ship', { ...fast, retriable: true, run: () => 'shipped' });

    const report = await checkSagaCrashes({
      pool: db.pool,
      saga: order,
      input: { sku: 'x' },
      signals: { approved: { ok: true } },
      idPrefix: 'cc',
    });
    expect(report.ok).toBe(true);
    const summary = report.runs.map((r) => `${r.mode}:${r.step}:${r.status}`);
    expect(summary).toEqual([
      'fail:reserve:compensated',
      'crash:reserve:completed',
      'crash-compensation:reserve:compensated',
      'fail:check:compensated',
      'crash:check:completed',
      'fail:hold:compensated',
      'crash:hold:completed',
      'crash-compensation:hold:compensated',
      'fail:charge:compensated',
      'crash:charge:completed',
      'fail:ship:completed',
      'crash:ship:completed',
    ]);
    expect(report.runs.find((r) => r.sagaId === 'cc:crash:hold')?.runs).toEqual({
      reserve: 1,
      check: 1,
      hold: 2,
      charge: 1,
      ship: 1,
    });
  });

  it('reports a saga that does not survive, naming the run and what went wrong', async () => {
    // One attempt only: a crash after the step's code leaves no retry.
    const brittle = defineSaga({ name: 'brittle', version: 1, input: z.object({}) })
      .step('a', { ...fast, run: () => 1, compensate: () => {} })
      .step('b', {
        ...fast,
        maxAttempts: 1,
        run: () => 2,
      });
    const failure = await checkSagaCrashes({
      pool: db.pool,
      saga: brittle,
      input: {},
      modes: ['crash'],
      idPrefix: 'br',
    }).catch((e: unknown) => e);
    expect((failure as Error).message).toContain(
      'saga "brittle" did not survive every injected fault',
    );
    expect((failure as Error).message).toContain(
      'crash at "b" (br:crash:b): ended compensated, expected completed',
    );
    const report = await checkSagaCrashes({
      pool: db.pool,
      saga: brittle,
      input: {},
      modes: ['crash'],
      idPrefix: 'br2',
      assert: false,
    });
    expect(report.ok).toBe(false);
    expect(report.runs.map((r) => [r.step, r.status, r.problems.length])).toEqual([
      ['a', 'completed', 0],
      ['b', 'compensated', 3],
    ]);
  });
});
