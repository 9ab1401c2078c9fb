import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSaga, sagaGraph } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { captureLogs, fast, settled, startSagas, timeline } from './fixtures.js';

const db = await useTestDatabase();

const refunds: string[] = [];
const shipped: string[] = [];

// Charge the card (the pivot), then wait for the warehouse to confirm, then ship.
const paidThenWait = (name: string, timeoutMs: number) =>
  defineSaga({ name, version: 1, input: z.object({}) })
    .step('reserve', { ...fast, run: () => 1, compensate: (ctx) => void refunds.push(ctx.sagaId) })
    .step('charge', { ...fast, pivot: true, run: () => ({ chargeId: 'ch_1' }) })
    .waitFor('packed', { payload: z.object({ box: z.string() }), timeoutMs })
    .step('ship', {
      ...fast,
      retriable: true,
      run: (ctx) => {
        shipped.push(ctx.sagaId);
        return { box: ctx.steps.packed.box, charge: ctx.steps.charge.chargeId };
      },
    });
const order = paidThenWait('paid-then-wait', 300);
// For the signal that comes in time: a loaded run can take 300 ms to see the saga waiting.
const patient = paidThenWait('paid-then-wait-patient', 60_000);

describe('a wait after the pivot', () => {
  it('is allowed, as a step that only goes forward', () => {
    expect(order.steps.map((s) => [s.name, s.role])).toEqual([
      ['reserve', 'compensatable'],
      ['charge', 'pivot'],
      ['packed', 'retriable'],
      ['ship', 'retriable'],
    ]);
    // No failure edge leaves it: nothing after the pivot compensates.
    expect(sagaGraph(order)).not.toMatch(/s2 -\./);
  });

  it('goes on when its signal comes in time', async () => {
    const { runtime } = await startSagas(db.pool, [patient]);
    await runtime.start(patient, { id: 'wp-ok', input: {} });
    await settled(runtime, 'wp-ok', ['waiting']);
    await runtime.signal('wp-ok', 'packed', { box: 'b1' });
    const done = await settled(runtime, 'wp-ok');
    expect(done.status).toBe('completed');
    expect(timeline(done)).toEqual([
      'reserve:completed',
      'charge:completed',
      'packed:completed',
      'ship:completed',
    ]);
  });

  it('on timeout fails the saga for an operator, alerts, and never compensates', async () => {
    const { logger, lines } = captureLogs();
    const { runtime } = await startSagas(db.pool, [order], { logger });
    await runtime.start(order, { id: 'wp-late', input: {} });
    const failed = await settled(runtime, 'wp-late');
    expect(failed.status).toBe('failed');
    expect(failed.error).toContain('after the pivot');
    expect(failed.error).toContain('signal "packed" did not arrive within 300 ms');
    expect(refunds).not.toContain('wp-late');
    expect(timeline(failed)).toEqual(['reserve:completed', 'charge:completed', 'packed:failed']);
    const alert = lines.find((l) => l.reason === 'wait_expired_after_pivot');
    expect(alert).toMatchObject({ level: 50, sagaId: 'wp-late', step: 'packed' });
  });

  it("an operator's retry puts it back to waiting, and the signal then finishes it", async () => {
    const { runtime } = await startSagas(db.pool, [order]);
    await runtime.start(order, { id: 'wp-retry', input: {} });
    expect((await settled(runtime, 'wp-retry')).status).toBe('failed');
    expect(await runtime.retryFailed('wp-retry')).toEqual({
      retried: true,
      step: 'packed',
      kind: 'step',
    });
    const waiting = await runtime.getSaga('wp-retry');
    expect(waiting!.status).toBe('waiting');
    expect(waiting!.error).toBeNull();
    expect(timeline(waiting!)).toEqual(['reserve:completed', 'charge:completed', 'packed:waiting']);
    // After the retry the wait has no timeout: it waits for the operator's signal, for good,
    // even once retention removed its old timeout job and the reconciler looks at it.
    await db.pool.query(`DELETE FROM skiplock.jobs WHERE idempotency_key = $1`, [
      'saga:wp-retry:timeout:packed',
    ]);
    expect((await runtime.reconciler.runOnce()).sagaIds).not.toContain('wp-retry');
    expect((await runtime.getSaga('wp-retry'))!.status).toBe('waiting');
    await runtime.signal('wp-retry', 'packed', { box: 'b2' });
    const done = await settled(runtime, 'wp-retry');
    expect(done.status).toBe('completed');
    expect(shipped.filter((s) => s === 'wp-retry')).toHaveLength(1);
  });

  it('a retry refuses a stored signal its schema no longer accepts, and changes nothing', async () => {
    const { runtime } = await startSagas(db.pool, [order]);
    await runtime.start(order, { id: 'wp-bad', input: {} });
    expect((await settled(runtime, 'wp-bad')).status).toBe('failed');
    // As if the definition changed without a new version after this signal was stored.
    await db.pool.query(
      `INSERT INTO skiplock.saga_signals (saga_id, name, payload) VALUES ($1, 'packed', '{"box": 7}')`,
      ['wp-bad'],
    );
    expect(await runtime.retryFailed('wp-bad')).toEqual({
      retried: false,
      step: 'packed',
      kind: 'step',
      reason: 'invalid_signal',
    });
    expect((await runtime.getSaga('wp-bad'))!.status).toBe('failed');
  });

  it('a signal that came while the saga was failed is taken by the retry at once', async () => {
    const { runtime } = await startSagas(db.pool, [order]);
    await runtime.start(order, { id: 'wp-early', input: {} });
    expect((await settled(runtime, 'wp-early')).status).toBe('failed');
    expect(await runtime.signal('wp-early', 'packed', { box: 'b3' })).toEqual({
      delivered: true,
      resumed: false,
    });
    expect((await runtime.retryFailed('wp-early')).retried).toBe(true);
    const done = await settled(runtime, 'wp-early');
    expect(done.status).toBe('completed');
    expect(done.history.find((h) => h.step === 'ship')!.output).toEqual({
      box: 'b3',
      charge: 'ch_1',
    });
    expect(refunds).not.toContain('wp-early');
  });
});
