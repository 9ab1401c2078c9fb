import { z } from 'zod';
import { defineJob, NonRetryableError } from '@skiplock/queue';
import { defineSaga } from '@skiplock/saga';

/** Charges fail for good while this is on; a test turns it off before retrying one. */
export const gate = { failCharges: true, failNotify: true };

export const sendMail = defineJob({
  type: 'send-mail',
  queue: 'mail',
  payload: z.object({ to: z.string() }),
  handler: async () => {},
});

export const charge = defineJob({
  type: 'charge-card',
  queue: 'billing',
  payload: z.object({ invoiceId: z.string(), cardNumber: z.string() }),
  maxAttempts: 3,
  handler: async () => {
    if (gate.failCharges) throw new NonRetryableError('card declined');
  },
});

/** Reserve, wait for approval, charge (the pivot), ship. */
export const order = defineSaga({
  name: 'order',
  version: 1,
  input: z.object({ orderId: z.string() }),
})
  .step('reserve', {
    run: async (_ctx, input) => ({ reservationId: `rsv_${input.orderId}` }),
    compensate: async () => {},
  })
  .waitFor('approved', { payload: z.object({ by: z.string() }), timeoutMs: 3_600_000 })
  .step('charge', { pivot: true, run: async () => ({ chargeId: 'ch_1' }) })
  .step('ship', { retriable: true, run: async () => ({ trackingId: 'trk_1' }) });

/**
 * Holds funds, then fails for good; undoing the hold fails and waits a minute for its retry, so
 * the saga stays `compensating` while the tests look at it.
 */
export const refund = defineSaga({
  name: 'refund',
  version: 1,
  input: z.object({ refundId: z.string() }),
})
  .step('hold', {
    run: async () => ({ held: true }),
    compensate: async () => {
      throw new Error('ledger unavailable');
    },
    compensation: { maxAttempts: 5, backoff: { baseMs: 60_000, maxMs: 60_000 } },
  })
  .step('pay', {
    run: async () => {
      throw new NonRetryableError('account closed');
    },
  });

/** Books a courier (the pivot), then notifies the customer: that step fails while the gate says so. */
export const dispatch = defineSaga({
  name: 'dispatch',
  version: 1,
  input: z.object({ parcelId: z.string() }),
})
  .step('book', { pivot: true, run: async () => ({ courier: 'c1' }) })
  .step('notify', {
    retriable: true,
    maxAttempts: 1,
    run: async () => {
      if (gate.failNotify) throw new Error('mail server down');
      return { sent: true };
    },
  });
