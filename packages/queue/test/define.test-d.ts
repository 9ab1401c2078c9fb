import type { StandardSchemaV1 } from '@standard-schema/spec';
import { expectTypeOf, test } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob, type PayloadOf } from '../src/index.js';

const charge = defineJob({
  type: 'charge',
  payload: z.object({ invoiceId: z.string(), amountCents: z.number() }),
  handler: async (payload) => {
    expectTypeOf(payload).toEqualTypeOf<{ invoiceId: string; amountCents: number }>();
  },
});

test('enqueue only accepts the definition payload shape', () => {
  const client = createClient({ connectionString: 'postgres://unused' });
  expectTypeOf<PayloadOf<typeof charge>>().toEqualTypeOf<{
    invoiceId: string;
    amountCents: number;
  }>();
  void client.enqueue(charge, { invoiceId: 'i', amountCents: 1 });
  // @ts-expect-error amountCents must be a number
  void client.enqueue(charge, { invoiceId: 'i', amountCents: '1' });
  // @ts-expect-error invoiceId is required
  void client.enqueue(charge, { amountCents: 1 });
});

/** A Standard Schema written by hand, no zod: digits in, a number out. */
const digits: StandardSchemaV1<{ id: string; count: string }, { id: string; count: number }> = {
  '~standard': {
    version: 1,
    vendor: 'hand-written',
    validate: (value) => ({ value: value as { id: string; count: number } }),
  },
};

test('a non-zod Standard Schema: producers pass its input, the handler gets its output', () => {
  const tally = defineJob({
    type: 'tally',
    payload: digits,
    handler: (payload) => {
      expectTypeOf(payload).toEqualTypeOf<{ id: string; count: number }>();
    },
  });
  expectTypeOf<PayloadOf<typeof tally>>().toEqualTypeOf<{ id: string; count: string }>();
  const client = createClient({ connectionString: 'postgres://unused' });
  void client.enqueue(tally, { id: 'a', count: '3' });
  // @ts-expect-error the producer passes the schema's input: count is digits, not a number
  void client.enqueue(tally, { id: 'a', count: 3 });
  void client.enqueueMany(tally, [{ payload: { id: 'a', count: '1' }, priority: 1 }]);
  // @ts-expect-error the same for a bulk
  void client.enqueueMany(tally, [{ payload: { id: 'a' } }]);
});

test('zod input and output types still differ across a transform', () => {
  const schema = z.object({ at: z.string().transform((s) => new Date(s)) });
  const stamp = defineJob({
    type: 'stamp',
    payload: schema,
    handler: (payload) => {
      expectTypeOf(payload).toEqualTypeOf<{ at: Date }>();
    },
  });
  expectTypeOf<PayloadOf<typeof stamp>>().toEqualTypeOf<{ at: string }>();
  // A zod schema seen only through its Standard Schema surface (another copy of zod) infers alike.
  const foreign = defineJob({
    type: 'stamp-foreign',
    payload: { '~standard': schema['~standard'] },
    handler: (payload) => {
      expectTypeOf(payload).toEqualTypeOf<{ at: Date }>();
    },
  });
  expectTypeOf<PayloadOf<typeof foreign>>().toEqualTypeOf<{ at: string }>();
  const client = createClient({ connectionString: 'postgres://unused' });
  void client.enqueue(stamp, { at: '2024-01-01' });
  // @ts-expect-error the producer passes the input (a string), not the output (a Date)
  void client.enqueue(foreign, { at: new Date() });
});

test('defineJob refuses a payload that is not a Standard Schema', () => {
  // @ts-expect-error a plain object is not a schema
  defineJob({ type: 'x', payload: { parse: () => 1 }, handler: () => {} });
});
