import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { NonRetryableError } from '@skiplock/queue';
import { defineSaga, SagaDefinitionError } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { fast, settled, startSagas, timeline } from './fixtures.js';

const db = await useTestDatabase();

/** Every job's type (without the `saga:` prefix) and lease, in insert order. */
async function leases(): Promise<[string, number][]> {
  const { rows } = await db.pool.query<{ job_type: string; lease_ms: number }>(
    `SELECT job_type, lease_ms FROM skiplock.jobs ORDER BY id`,
  );
  return rows.map((r) => [r.job_type.replace(/^saga:/, ''), r.lease_ms]);
}

const noop = () => {};

describe("a saga's leaseMs", () => {
  it('is the lease of every job of the saga that sets none: steps, compensations, branches, waits, sleeps and their timeouts', async () => {
    const saga = defineSaga({ name: 'leased', version: 1, input: z.object({}), leaseMs: 4_000 })
      .step('a', { ...fast, run: () => 'a', compensate: noop })
      .parallel('p', (branch) => ({
        x: branch({ ...fast, run: () => 'x', compensate: noop }),
        y: branch({ ...fast, leaseMs: 7_000, run: () => 'y', compensate: noop }),
      }))
      .sleep('nap', 10)
      .waitFor('ok', { payload: z.object({}), timeoutMs: 60_000 })
      .step('b', {
        ...fast,
        leaseMs: 9_000,
        run: () => 'b',
        compensation: { ...fast, leaseMs: 8_000 },
        compensate: noop,
      })
      .step('boom', {
        ...fast,
        run: () => {
          throw new NonRetryableError('no');
        },
      });
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'lease-1', input: {} });
    // The wait's timeout job goes when the signal comes: read while the saga waits.
    const waiting = await waitFor(async () => {
      const seen = await leases();
      return seen.some(([type]) => type === 'leased:v1:ok:timeout') ? seen : null;
    });
    await runtime.signal('lease-1', 'ok', {});
    const view = await settled(runtime, 'lease-1');
    expect(view.status).toBe('compensated');
    expect(timeline(view).at(-1)).toBe('undo a:completed');
    const all = new Map([...waiting, ...(await leases())]);
    expect(Object.fromEntries(all)).toEqual({
      'leased:v1:a': 4_000,
      'leased:v1:p': 4_000,
      'leased.p.x:v1:x': 4_000,
      'leased.p.y:v1:y': 7_000,
      'leased:v1:nap': 4_000,
      'leased:v1:nap:timeout': 4_000,
      'leased:v1:ok': 4_000,
      'leased:v1:ok:timeout': 4_000,
      'leased:v1:b': 9_000,
      'leased:v1:boom': 4_000,
      'leased:v1:b:compensate': 8_000,
      'leased:v1:p:compensate': 4_000,
      'leased.p.x:v1:x:compensate': 4_000,
      'leased.p.y:v1:y:compensate': 4_000,
      'leased:v1:a:compensate': 4_000,
    });
  });

  it("leaves the queue's default lease to a saga without one", async () => {
    const saga = defineSaga({ name: 'unleased', version: 1, input: z.object({}) })
      .step('a', { ...fast, run: () => 'a' })
      .waitFor('ok', { payload: z.object({}), timeoutMs: 60_000 });
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'unleased-1', input: {} });
    const seen = await waitFor(async () => {
      const rows = (await leases()).filter(([type]) => type.startsWith('unleased:'));
      return rows.length === 3 ? rows : null;
    });
    expect(seen).toEqual([
      ['unleased:v1:a', 30_000],
      ['unleased:v1:ok', 30_000],
      ['unleased:v1:ok:timeout', 30_000],
    ]);
  });

  it('is refused when it is not an integer of ms from 1,000 to a day, naming the saga', () => {
    for (const [leaseMs, shown] of [
      [999, '999'],
      [86_400_001, '86400001'],
      [1.5, '1.5'],
      ['3000', '"3000"'],
      [Number.NaN, 'NaN'],
      [Number.POSITIVE_INFINITY, 'Infinity'],
      [3000n, '3000'],
    ] as const) {
      expect(() =>
        defineSaga({
          name: 'bad-lease',
          version: 1,
          input: z.object({}),
          leaseMs: leaseMs as unknown as number,
        }),
      ).toThrow(
        new SagaDefinitionError(
          'bad-lease',
          `leaseMs must be an integer of ms from 1000 to 86400000 (a day), got ${shown}`,
        ),
      );
    }
  });
});
