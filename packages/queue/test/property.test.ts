import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob, SkiplockError, type EnqueueOptions } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { quiet } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });
/** Every job row, as text: what a refused input must leave exactly as it was. */
async function snapshot(): Promise<string> {
  const { rows } = await db.pool.query<{ rows: string }>(
    `SELECT coalesce(string_agg(to_jsonb(j)::text, E'\\n' ORDER BY id), '') AS rows
     FROM skiplock.jobs j`,
  );
  return rows[0]!.rows;
}

const adversarialString = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 20 }),
  fc.constantFrom('\u0000', 'a\u0000b', '\ud800', 'x\udfff', '\ud83d\ude00', '%', ':', ''),
);
const option = fc.record(
  {
    queue: fc.oneof(fc.constantFrom('default', 'other', ''), adversarialString),
    priority: fc.oneof(fc.integer({ min: -2000, max: 2000 }), fc.double(), fc.constant(2 ** 40)),
    delayMs: fc.oneof(fc.integer({ min: -10, max: 10 ** 9 }), fc.double()),
    runAt: fc.oneof(fc.date({ noInvalidDate: false }), fc.constant(new Date('x'))),
    idempotencyKey: fc.oneof(adversarialString, fc.string({ minLength: 190, maxLength: 1200 })),
    maxAttempts: fc.oneof(fc.integer({ min: -5, max: 2000 }), fc.double()),
  },
  { requiredKeys: [] },
);

describe('property: enqueue options are either applied exactly or refused by name', () => {
  it('stores accepted options as given; refuses others with a SkiplockError naming the option', async () => {
    const job = defineJob({ type: 'property.options', payload: z.object({}), handler: () => {} });
    await fc.assert(
      fc.asyncProperty(option, async (options: EnqueueOptions) => {
        const before = await snapshot();
        let result: { id: string; inserted: boolean };
        try {
          result = await client.enqueue(job, {}, options);
        } catch (error) {
          expect(error).toBeInstanceOf(SkiplockError);
          const named = Object.keys(options).some((key) => (error as Error).message.includes(key));
          expect(named, (error as Error).message).toBe(true);
          expect(await snapshot()).toBe(before);
          return;
        }
        const stored = (await client.getJob(result.id))!;
        if (!result.inserted) {
          // A duplicate key: the first job's row, untouched.
          expect(stored.idempotencyKey).toBe(options.idempotencyKey);
          expect(await snapshot()).toBe(before);
          return;
        }
        if (options.queue !== undefined) expect(stored.queue).toBe(options.queue);
        // `+ 0`: an accepted -0 is stored as 0 (PostgreSQL integers have no signed zero); a run
        // of this property once drew -0 and failed on Object.is.
        if (options.priority !== undefined) expect(stored.priority).toBe(options.priority + 0);
        if (options.maxAttempts !== undefined) expect(stored.maxAttempts).toBe(options.maxAttempts);
        expect(stored.idempotencyKey).toBe(options.idempotencyKey ?? null);
        if (options.runAt !== undefined && options.delayMs === undefined) {
          expect(stored.runAt.getTime()).toBe(options.runAt.getTime());
        }
      }),
      { numRuns: 300 },
    );
  });
});
