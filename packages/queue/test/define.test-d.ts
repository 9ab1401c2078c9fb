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
