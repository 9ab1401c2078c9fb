import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSaga, SagaDefinitionError, SagaError } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { settled, startSagas, timeline } from './fixtures.js';

const db = await useTestDatabase();
const DAY = 86_400_000;
const YEAR = 365 * DAY;
const TEN_YEARS = 10 * YEAR;

describe('a deadline longer than a Node timer holds (2^31-1 ms, about 24.8 days)', () => {
  it('a 30-day deadline, from the definition or the start, does not abort the steps', async () => {
    const seen: string[] = [];
    const saga = defineSaga({
      name: 'month-deadline',
      version: 1,
      input: z.object({}),
      deadlineMs: 30 * DAY,
    })
      .step('reserve', {
        run: async (ctx) => {
          await sleep(30);
          seen.push(`${ctx.sagaId} reserve aborted=${ctx.signal.aborted}`);
          return 1;
        },
        compensate: async (ctx) => void seen.push(`${ctx.sagaId} undo reserve`),
      })
      .step('charge', {
        pivot: true,
        run: async (ctx) => {
          await sleep(30);
          seen.push(`${ctx.sagaId} charge aborted=${ctx.signal.aborted}`);
          return 2;
        },
      });
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'd30', input: {} });
    await runtime.start(saga, { id: 'd365', input: {}, deadlineMs: 365 * DAY });
    for (const id of ['d30', 'd365']) {
      const view = await settled(runtime, id);
      expect(view.status).toBe('completed');
      expect(timeline(view)).toEqual(['reserve:completed', 'charge:completed']);
    }
    expect(seen.sort()).toEqual([
      'd30 charge aborted=false',
      'd30 reserve aborted=false',
      'd365 charge aborted=false',
      'd365 reserve aborted=false',
    ]);
  });
});

describe("durations up to ten years, the queue's longest delay", () => {
  const waiting = (name: string, wait: { timeoutMs?: number }, deadlineMs?: number) =>
    defineSaga({ name, version: 1, input: z.object({}), ...(deadlineMs ? { deadlineMs } : {}) })
      .step('reserve', { run: () => 1, compensate: () => {} })
      .waitFor('approved', { payload: z.object({}), ...wait })
      .step('charge', { pivot: true, run: () => 2 });

  it('refuses a wait timeoutMs or a deadlineMs past ten years, naming the field', () => {
    expect(() => waiting('t', { timeoutMs: TEN_YEARS + 1 })).toThrow(SagaDefinitionError);
    expect(() => waiting('t', { timeoutMs: 11 * YEAR })).toThrow(
      /wait step "approved": timeoutMs must be an integer of ms from 1 to 315360000000 \(ten years\)/,
    );
    expect(() => waiting('d', {}, TEN_YEARS + 1)).toThrow(SagaDefinitionError);
    expect(() => waiting('d', {}, 1e300)).toThrow(/deadlineMs must be an integer of ms from 1 to/);
    // Ten years is accepted.
    expect(() => waiting('ok', { timeoutMs: TEN_YEARS }, TEN_YEARS)).not.toThrow();
  });

  it('a start refuses a deadlineMs past ten years with a SagaError naming it, writing nothing', async () => {
    const saga = waiting('start-deadline', {});
    const { runtime } = await startSagas(db.pool, [saga]);
    for (const [i, deadlineMs] of [TEN_YEARS + 1, 11 * YEAR, 2 ** 53, 1e300].entries()) {
      const error = await runtime.start(saga, { id: `bad-${i}`, input: {}, deadlineMs }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(SagaError);
      expect(error).toMatchObject({ code: 'invalid_deadline' });
      expect((error as Error).message).toMatch(/^deadlineMs must be an integer of ms from 1 to/);
    }
    const { rows } = await db.pool.query(`SELECT id FROM skiplock.sagas WHERE id LIKE 'bad-%'`);
    expect(rows).toEqual([]);
  });

  it('waits and sleeps of ten years park, their job due then (not a step failed at run time)', async () => {
    const timeout = waiting('ten-year-timeout', { timeoutMs: TEN_YEARS });
    const deadline = waiting('ten-year-deadline', {}, TEN_YEARS);
    const plain = waiting('plain-wait', {});
    const nap = defineSaga({ name: 'ten-year-sleep', version: 1, input: z.object({}) })
      .step('reserve', { run: () => 1, compensate: () => {} })
      .sleep('nap', TEN_YEARS);
    const napUntil = defineSaga({ name: 'twenty-year-sleep', version: 1, input: z.object({}) })
      .step('reserve', { run: () => 1, compensate: () => {} })
      .sleep('nap', () => new Date(Date.now() + 20 * YEAR));
    const { runtime } = await startSagas(db.pool, [timeout, deadline, plain, nap, napUntil]);
    await runtime.start(timeout, { id: 'w-timeout', input: {} });
    await runtime.start(deadline, { id: 'w-deadline', input: {} });
    await runtime.start(plain, { id: 'w-start-deadline', input: {}, deadlineMs: TEN_YEARS });
    await runtime.start(nap, { id: 's-fixed', input: {} });
    await runtime.start(napUntil, { id: 's-until', input: {} });
    for (const id of ['w-timeout', 'w-deadline', 'w-start-deadline', 's-fixed', 's-until']) {
      const view = await settled(runtime, id, ['waiting', 'compensated', 'failed']);
      expect(view.status, id).toBe('waiting');
      const { rows } = await db.pool.query<{ years: number }>(
        `SELECT extract(epoch FROM run_at - now()) / (365 * 86400) AS years
           FROM skiplock.jobs WHERE idempotency_key LIKE $1`,
        [`saga:${id}:timeout:%`],
      );
      expect(rows.length, id).toBe(1);
      expect(Number(rows[0]!.years), id).toBeGreaterThan(9.99);
      expect(Number(rows[0]!.years), id).toBeLessThanOrEqual(10);
    }
  });
});
