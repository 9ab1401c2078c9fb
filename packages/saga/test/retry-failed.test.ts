import { NonRetryableError } from '@skiplock/queue';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSaga } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { fast, settled, startSagas } from './fixtures.js';

const db = await useTestDatabase();

describe("retryFailed: an operator's retry of a failed saga", () => {
  it('runs again the step past the pivot that failed, and the saga completes', async () => {
    const broken = { ship: true };
    const shipped: string[] = [];
    const saga = defineSaga({ name: 'ship-order', version: 1, input: z.object({}) })
      .step('charge', { pivot: true, run: async () => ({ chargeId: 'ch_1' }) })
      .step('ship', {
        retriable: true,
        maxAttempts: 2,
        ...fast,
        run: async (ctx) => {
          if (broken.ship) throw new NonRetryableError('carrier refused');
          shipped.push(ctx.sagaId);
          return { trackingId: 'trk_1' };
        },
      });
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'o-1', input: {} });
    const failed = await settled(runtime, 'o-1');
    expect(failed.status).toBe('failed');
    expect(failed.error).toContain('carrier refused');
    // Not failed, or not known: nothing happens.
    await runtime.start(saga, { id: 'o-2', input: {} });
    broken.ship = false;
    expect((await settled(runtime, 'o-2')).status).toBe('completed');
    expect(await runtime.retryFailed('o-2')).toEqual({ retried: false, reason: 'not_failed' });

    expect(await runtime.retryFailed('o-1')).toEqual({ retried: true, step: 'ship', kind: 'step' });
    const done = await settled(runtime, 'o-1');
    expect(done.status).toBe('completed');
    expect(done.error).toBeNull();
    expect(done.finishedAt).not.toBeNull();
    expect(done.history.map((h) => `${h.step}:${h.status}`)).toEqual([
      'charge:completed',
      'ship:completed',
    ]);
    expect(shipped).toEqual(['o-2', 'o-1']);
    // A second retry finds nothing to do.
    expect((await runtime.retryFailed('o-1')).retried).toBe(false);
  });

  it('runs again the compensation that failed, and the saga ends compensated', async () => {
    const broken = { release: true };
    const saga = defineSaga({ name: 'hold-funds', version: 1, input: z.object({}) })
      .step('hold', {
        run: async () => ({ held: true }),
        compensate: async () => {
          if (broken.release) throw new NonRetryableError('ledger down');
        },
        compensation: { maxAttempts: 1 },
      })
      .step('pay', {
        run: async () => {
          throw new NonRetryableError('account closed');
        },
      });
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'h-1', input: {} });
    expect((await settled(runtime, 'h-1')).status).toBe('failed');
    broken.release = false;
    expect(await runtime.retryFailed('h-1')).toEqual({
      retried: true,
      step: 'hold',
      kind: 'compensation',
    });
    const done = await settled(runtime, 'h-1');
    expect(done.status).toBe('compensated');
    expect(done.history.map((h) => `${h.kind}:${h.step}:${h.status}`)).toEqual([
      'step:hold:completed',
      'step:pay:failed',
      'compensation:hold:completed',
    ]);
  });
});
