import { createWorker, SkiplockError } from '@skiplock/queue';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createSagaRuntime, defineSaga } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { fast, silent } from './fixtures.js';

const db = await useTestDatabase();

const adversarialId = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.constantFrom('', ':', 'K:compensate', 'compensate', '%', '%3A', 'a b', 'x'.repeat(1_000)),
  fc.stringMatching(/^[a-z0-9:%_-]{1,30}$/),
);

describe('property: saga ids are taken exactly or refused by name, and never share jobs', () => {
  it('starts sagas under any accepted id, each finishing on its own jobs; refuses the rest typed', async () => {
    const saga = defineSaga({ name: 'prop-ids', version: 1, input: z.object({}) })
      .step('reserve', { ...fast, run: (ctx) => ctx.sagaId, compensate: () => {} })
      .step('charge', { ...fast, run: (ctx) => ctx.sagaId });
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [saga], logger: silent });
    const accepted = new Set<string>();
    await fc.assert(
      fc.asyncProperty(adversarialId, async (id) => {
        try {
          await runtime.start(saga, { id, input: {} });
        } catch (error) {
          expect(error).toBeInstanceOf(SkiplockError);
          expect((error as Error).message).toMatch(/id/);
          // Nothing was stored under it (reading an id the rule refuses may itself be refused).
          expect(await (async () => runtime.getSaga(id))().catch(() => null)).toBeNull();
          return;
        }
        accepted.add(id);
        expect((await runtime.getSaga(id))?.id).toBe(id);
      }),
      { numRuns: 200 },
    );
    expect(accepted.size).toBeGreaterThan(20);
    const worker = createWorker({
      pool: db.pool,
      jobs: runtime.jobs,
      logger: silent,
      concurrency: 10,
      pollIntervalMs: 20,
      sweeper: false,
      retention: false,
    });
    await worker.start();
    await waitFor(
      async () => {
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM skiplock.sagas WHERE name = 'prop-ids' AND status = 'completed'`,
        );
        return rows[0]!.n === accepted.size;
      },
      { timeoutMs: 60_000, what: 'every accepted saga to complete' },
    );
    await worker.stop();
    // Each saga's steps ran for it alone: their outputs are its own id.
    for (const id of accepted) {
      const view = (await runtime.getSaga(id))!;
      expect(view.history.map((h) => [h.step, h.output])).toEqual([
        ['reserve', id],
        ['charge', id],
      ]);
    }
    await runtime.close();
  });
});

describe('property: signal payloads are delivered exactly or refused by name', () => {
  it('resumes a waiting saga with the payload it accepted; refuses others typed, changing nothing', async () => {
    const saga = defineSaga({ name: 'prop-signal', version: 1, input: z.object({}) })
      .waitFor('paid', { payload: z.object({ amount: z.number().int(), note: z.string() }) })
      .step('book', { ...fast, run: (ctx) => ctx.steps.paid });
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [saga], logger: silent });
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.record({ amount: fc.integer(), note: fc.string({ unit: 'binary', maxLength: 20 }) }),
          fc.anything(),
        ),
        async (payload) => {
          const id = `sig-${n++}`;
          await runtime.start(saga, { id, input: {} });
          const before = await runtime.getSaga(id);
          try {
            await runtime.signal(id, 'paid', payload as { amount: number; note: string });
          } catch (error) {
            expect(error).toBeInstanceOf(SkiplockError);
            expect(await runtime.getSaga(id)).toEqual(before);
            return;
          }
          const stored = (await runtime.getSaga(id))!.signals[0]!.payload;
          expect(stored).toEqual(payload);
        },
      ),
      { numRuns: 150 },
    );
    await runtime.close();
  });
});
