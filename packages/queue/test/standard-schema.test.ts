import type { StandardSchemaV1 } from '@standard-schema/spec';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob, InvalidPayloadError, validatePayload } from '../src/index.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { jobRow, quiet, testWorker } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

interface OrderIn {
  sku: string;
  quantity: string;
}
interface OrderOut {
  sku: string;
  quantity: number;
}

/** Checks an order by hand, no library: the quantity comes in as digits and goes out a number. */
function checkOrder(value: unknown): StandardSchemaV1.Result<OrderOut> {
  if (typeof value !== 'object' || value === null) {
    return { issues: [{ message: 'expected an object' }] };
  }
  const { sku, quantity } = value as Record<string, unknown>;
  const issues: StandardSchemaV1.Issue[] = [];
  if (typeof sku !== 'string' || sku === '') {
    issues.push({ message: 'expected a non-empty string', path: ['sku'] });
  }
  if (typeof quantity !== 'string' || !/^[0-9]+$/.test(quantity)) {
    // The spec lets a path segment be a key or a `{ key }` object.
    issues.push({ message: 'expected digits', path: [{ key: 'quantity' }] });
  }
  if (issues.length > 0) return { issues };
  return { value: { sku: sku as string, quantity: Number(quantity) } };
}

const handWritten: StandardSchemaV1<OrderIn, OrderOut> = {
  '~standard': { version: 1, vendor: 'hand-written', validate: checkOrder },
};

const handWrittenAsync: StandardSchemaV1<OrderIn, OrderOut> = {
  '~standard': {
    version: 1,
    vendor: 'hand-written-async',
    validate: async (value) => {
      await new Promise((resolve) => setTimeout(resolve, 1));
      return checkOrder(value);
    },
  },
};

async function countOf(jobType: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM skiplock.jobs WHERE job_type = $1',
    [jobType],
  );
  return rows[0]!.n;
}

/** Defines a job on `schema` whose handler records what it received. */
function recordingJob<S extends StandardSchemaV1>(type: string, schema: S) {
  const received: StandardSchemaV1.InferOutput<S>[] = [];
  const definition = defineJob({
    type,
    payload: schema,
    handler: (payload) => {
      received.push(payload);
    },
  });
  return { definition, received };
}

describe('a job payload schema that is not zod (Standard Schema)', () => {
  for (const [kind, schema] of [
    ['synchronous', handWritten],
    ['asynchronous', handWrittenAsync],
  ] as const) {
    it(`${kind}: refuses a bad payload on enqueue, naming each field, and inserts nothing`, async () => {
      const type = `order-refused-${kind}`;
      const { definition } = recordingJob(type, schema);
      const logs = captureLogs();
      const logged = createClient({ pool: db.pool, logger: logs.logger });

      const error = await logged
        .enqueue(definition, { sku: '', quantity: 'three' })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidPayloadError);
      expect((error as InvalidPayloadError).code).toBe('invalid_payload');
      expect((error as Error).message).toBe(
        `invalid payload for job type "${type}": ` +
          'payload.sku: expected a non-empty string; payload.quantity: expected digits',
      );
      expect((error as InvalidPayloadError).issues).toEqual([
        { path: 'payload.sku', message: 'expected a non-empty string' },
        { path: 'payload.quantity', message: 'expected digits' },
      ]);
      expect(logs.reasons()).toContain('invalid_payload');

      // A bulk is refused whole, naming the item.
      const bulk = await logged
        .enqueueMany(definition, [
          { payload: { sku: 'a', quantity: '1' } },
          { payload: { sku: 'b', quantity: 'x' } },
        ])
        .catch((e: unknown) => e);
      expect(bulk).toBeInstanceOf(InvalidPayloadError);
      expect((bulk as InvalidPayloadError).issues).toEqual([
        { path: 'items[1].payload.quantity', message: 'expected digits' },
      ]);
      // The same with per-item options (the other bulk path).
      const withOptions = await logged
        .enqueueMany(definition, [
          { payload: { sku: 'a', quantity: '1' }, priority: 2 },
          { payload: { sku: '', quantity: '1' }, priority: 2 },
        ])
        .catch((e: unknown) => e);
      expect((withOptions as InvalidPayloadError).issues).toEqual([
        { path: 'items[1].payload.sku', message: 'expected a non-empty string' },
      ]);
      expect(await countOf(type)).toBe(0);
      await logged.close();
    });

    it(`${kind}: stores the producer's input and hands the handler the schema's output`, async () => {
      const type = `order-runs-${kind}`;
      const { definition, received } = recordingJob(type, schema);
      const { id } = await client.enqueue(definition, { sku: 'tea', quantity: '3' });
      const many = await client.enqueueMany(definition, [
        { payload: { sku: 'milk', quantity: '1' } },
        { payload: { sku: 'sugar', quantity: '12' }, priority: 5 },
      ]);
      expect(many.every((r) => r.inserted)).toBe(true);
      expect((await client.getJob(id))!.payload).toEqual({ sku: 'tea', quantity: '3' });

      const worker = testWorker(db.pool, [definition]);
      while ((await worker.runOnce()) > 0);
      expect(received).toHaveLength(3);
      expect(received).toEqual(
        expect.arrayContaining([
          { sku: 'tea', quantity: 3 },
          { sku: 'milk', quantity: 1 },
          { sku: 'sugar', quantity: 12 },
        ]),
      );
      expect((await jobRow(db.pool, id)).status).toBe('completed');
    });

    it(`${kind}: sends a stored payload its schema refuses to dead without running the handler`, async () => {
      const type = `order-stored-${kind}`;
      const { definition, received } = recordingJob(type, schema);
      const { rows } = await db.pool.query<{ id: string }>(
        `INSERT INTO skiplock.jobs (job_type, payload) VALUES ($1, '{"sku": "x", "quantity": 4}') RETURNING id::text`,
        [type],
      );
      await testWorker(db.pool, [definition]).runOnce();
      const row = await jobRow(db.pool, rows[0]!.id);
      expect(received).toEqual([]);
      expect(row.status).toBe('dead');
      expect(row.errors[0]).toMatchObject({ reason: 'invalid_payload', attempt: 1 });
      expect(row.last_error).toContain('payload.quantity: expected digits');
    });
  }

  it('fails the attempt (not the worker) when a schema throws instead of returning issues', async () => {
    let calls = 0;
    const throwing: StandardSchemaV1<{ n: number }> = {
      '~standard': {
        version: 1,
        vendor: 'throws',
        validate: (value) => {
          calls += 1;
          // Enqueue validates first; the worker's check throws, as a buggy validator might.
          if (calls > 1) throw new Error('validator blew up');
          return { value: value as { n: number } };
        },
      },
    };
    const received: { n: number }[] = [];
    const job = defineJob({
      type: 'validator-throws',
      payload: throwing,
      maxAttempts: 1,
      handler: (payload) => void received.push(payload),
    });
    const { id } = await client.enqueue(job, { n: 1 });
    await testWorker(db.pool, [job]).runOnce();
    const row = await jobRow(db.pool, id);
    expect(received).toEqual([]);
    expect(row.status).toBe('dead');
    expect(row.errors[0]).toMatchObject({ reason: 'error', message: 'validator blew up' });
  });

  it('validatePayload resolves to the output, or rejects naming the fields', async () => {
    const { definition } = recordingJob('order-validate', handWrittenAsync);
    await expect(validatePayload(definition, { sku: 's', quantity: '7' })).resolves.toEqual({
      sku: 's',
      quantity: 7,
    });
    await expect(validatePayload(definition, { sku: 's', quantity: 7 })).rejects.toThrow(
      'invalid payload for job type "order-validate": payload.quantity: expected digits',
    );
  });
});

describe('zod schemas through Standard Schema', () => {
  const zodOrder = z.object({
    sku: z.string().min(1),
    quantity: z
      .string()
      .regex(/^[0-9]+$/, 'expected digits')
      .transform(Number),
  });

  it('accepts a zod schema from another copy of zod (fails instanceof, has `~standard`)', async () => {
    // What an application's own zod install looks like from here: zod's Standard Schema surface,
    // but not an instance of this package's z.ZodType.
    const foreign = { '~standard': zodOrder['~standard'] };
    expect(foreign instanceof z.ZodType).toBe(false);
    const { definition, received } = recordingJob('order-foreign-zod', foreign);

    const error = await client
      .enqueue(definition, { sku: 'tea', quantity: 'x' })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidPayloadError);
    expect((error as Error).message).toBe(
      'invalid payload for job type "order-foreign-zod": payload.quantity: expected digits',
    );
    expect(await countOf('order-foreign-zod')).toBe(0);

    await client.enqueue(definition, { sku: 'tea', quantity: '2' });
    await testWorker(db.pool, [definition]).runOnce();
    expect(received).toEqual([{ sku: 'tea', quantity: 2 }]);
  });

  it('runs a zod schema with an async refinement, which safeParse could not', async () => {
    const known = new Set(['tea']);
    const schema = z.object({
      sku: z.string().refine(async (sku) => known.has(sku), 'unknown sku'),
    });
    const { definition, received } = recordingJob('order-async-zod', schema);
    await expect(client.enqueue(definition, { sku: 'coffee' })).rejects.toThrow(
      'invalid payload for job type "order-async-zod": payload.sku: unknown sku',
    );
    await client.enqueue(definition, { sku: 'tea' });
    await testWorker(db.pool, [definition]).runOnce();
    expect(received).toEqual([{ sku: 'tea' }]);
  });

  it('keeps zod error paths into arrays and nested objects', async () => {
    const { definition } = recordingJob(
      'order-nested-zod',
      z.object({ lines: z.array(z.object({ sku: z.string() })) }),
    );
    const error = await client
      .enqueue(definition, { lines: [{ sku: 'a' }, { sku: 1 as unknown as string }] })
      .catch((e: unknown) => e);
    expect((error as InvalidPayloadError).issues).toEqual([
      { path: 'payload.lines.1.sku', message: expect.stringContaining('string') as string },
    ]);
  });
});

describe('defineJob refuses a payload that is not a Standard Schema', () => {
  const handler = () => {};
  it.each([
    ['a plain object', {}, 'it has no `~standard` property'],
    ['null', null, 'got null'],
    ['a string', 'z.string()', 'got string'],
    [
      'another version of the spec',
      { '~standard': { version: 2, vendor: 'x', validate: () => ({ value: 1 }) } },
      'its `~standard.version` is 2, not 1',
    ],
    [
      'a schema without validate',
      { '~standard': { version: 1, vendor: 'x' } },
      'its `~standard.validate` is not a function',
    ],
  ])('%s', (_what, payload, problem) => {
    const define = () =>
      defineJob({ type: 'not-a-schema', payload: payload as StandardSchemaV1, handler });
    expect(define).toThrow(TypeError);
    expect(define).toThrow(
      `job type "not-a-schema": payload must be a Standard Schema v1 validator (a zod 4, ` +
        `valibot or arktype schema, or any object with a \`~standard\` property): ${problem}`,
    );
  });
});
