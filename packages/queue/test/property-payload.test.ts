import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob, InvalidPayloadError } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { quiet, testWorker } from './fixtures.js';

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
/** True when `value` is plain JSON that PostgreSQL's jsonb stores unchanged. */
function storable(value: unknown): boolean {
  if (value === null || typeof value === 'boolean') return true;
  if (typeof value === 'number') return Number.isFinite(value);
  if (typeof value === 'string') {
    // jsonb refuses \u0000 and lone surrogates; JSON.stringify keeps a lone surrogate escaped.
    return (
      !value.includes('\u0000') &&
      !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(value)
    );
  }
  if (Array.isArray(value)) return value.every(storable);
  if (typeof value === 'object') {
    const proto = Object.getPrototypeOf(value) as unknown;
    if (proto !== Object.prototype && proto !== null) return false;
    return Object.entries(value as object).every(([k, v]) => storable(k) && storable(v));
  }
  return false;
}

const leaf = fc.oneof(
  fc.constantFrom(null, true, false, 0, -0, 1.5, NaN, Infinity, -Infinity, 2 ** 60),
  fc.integer(),
  fc.double(),
  adversarialString,
  fc.bigInt({ min: -10n, max: 10n }),
  fc.constantFrom(undefined, new Date(0), new Map([[1, 2]]), () => 1),
);
const payload = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small' }, leaf, tie('array'), tie('object')),
  array: fc.array(tie('value'), { maxLength: 4 }),
  object: fc.dictionary(adversarialString, tie('value'), { maxKeys: 4 }),
})).value;

const ran: unknown[] = [];
const anyPayload = defineJob({
  type: 'property.any',
  queue: 'property',
  payload: z.unknown(),
  handler: (payload) => void ran.push(payload),
});

describe('property: enqueue takes any payload and either stores it exactly or refuses it by name', () => {
  it('round-trips JSON payloads exactly, refuses the rest with InvalidPayloadError, changes nothing else', async () => {
    const accepted: { id: string; payload: unknown }[] = [];
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.jsonValue(), payload), async (value) => {
        const before = await snapshot();
        let id: string | null = null;
        try {
          ({ id } = await client.enqueue(anyPayload, value));
        } catch (error) {
          expect(error, `refused ${String(error)}`).toBeInstanceOf(InvalidPayloadError);
          expect(storable(value), `refused plain JSON: ${String(error)}`).toBe(false);
          expect((error as InvalidPayloadError).message).toMatch(/payload/);
          expect(await snapshot()).toBe(before);
          return;
        }
        // Accepted: it reads back as JSON.stringify wrote it (toJSON applied, undefined dropped).
        const text = JSON.stringify(value);
        const job = await client.getJob(id);
        expect(job!.payload).toEqual(text === undefined ? null : (JSON.parse(text) as unknown));
        accepted.push({ id, payload: value });
      }),
      { numRuns: 300 },
    );
    // Nothing accepted crashes a worker: every job runs and completes with its payload.
    const worker = testWorker(db.pool, [anyPayload], { concurrency: 20 });
    while ((await worker.runOnce()) > 0);
    await worker.stop();
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM skiplock.jobs WHERE queue = 'property' AND status <> 'completed'`,
    );
    expect(rows[0]!.n).toBe(0);
    expect(ran).toHaveLength(accepted.length);
  });
});
