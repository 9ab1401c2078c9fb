import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSaga } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { fast, settled, startSagas, timeline } from './fixtures.js';

const db = await useTestDatabase();

describe('a saga that succeeds', () => {
  it('runs every step in order, each seeing the outputs before it, and completes', async () => {
    const keys: string[] = [];
    const order = defineSaga({
      name: 'order',
      version: 1,
      input: z.object({ sku: z.string(), qty: z.number() }),
    })
      .step('reserve', {
        ...fast,
        run: (ctx, input) => {
          keys.push(ctx.idempotencyKey);
          return { reservationId: `r-${input.sku}`, qty: input.qty };
        },
        compensate: () => {},
      })
      .step('charge', {
        ...fast,
        pivot: true,
        run: (ctx) => {
          keys.push(ctx.idempotencyKey);
          return {
            chargeId: `c-${ctx.steps.reserve.reservationId}`,
            cents: ctx.steps.reserve.qty * 100,
          };
        },
      })
      .step('ship', {
        ...fast,
        retriable: true,
        run: async (ctx) => ({ label: `${ctx.steps.charge.chargeId}/${ctx.input.sku}` }),
      });
    const { runtime } = await startSagas(db.pool, [order]);
    const result = await runtime.start(order, { id: 'order-1', input: { sku: 'ab', qty: 3 } });
    expect(result).toEqual({ id: 'order-1', started: true, status: 'running' });
    const saga = await settled(runtime, 'order-1');
    expect(saga.status).toBe('completed');
    expect(timeline(saga)).toEqual(['reserve:completed', 'charge:completed', 'ship:completed']);
    expect(saga.history.map((h) => h.output)).toEqual([
      { reservationId: 'r-ab', qty: 3 },
      { chargeId: 'c-r-ab', cents: 300 },
      { label: 'c-r-ab/ab' },
    ]);
    expect(saga.history.every((h) => h.attempts === 1 && h.startedAt && h.finishedAt)).toBe(true);
    expect(saga.pivoted).toBe(true);
    expect(saga.currentStep).toBeNull();
    expect(saga.finishedAt).not.toBeNull();
    expect(keys).toEqual(['saga:order-1:reserve', 'saga:order-1:charge']);
    const jobs = await db.pool.query<{ idempotency_key: string; status: string }>(
      `SELECT idempotency_key, status FROM skiplock.jobs ORDER BY id`,
    );
    expect(jobs.rows).toEqual([
      { idempotency_key: 'saga:order-1:reserve', status: 'completed' },
      { idempotency_key: 'saga:order-1:charge', status: 'completed' },
      { idempotency_key: 'saga:order-1:ship', status: 'completed' },
    ]);
  });
});
