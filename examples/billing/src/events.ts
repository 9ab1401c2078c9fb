import { defineOutbox } from '@skiplock/outbox';
import { z } from 'zod';

/**
 * The billing domain's events. Each is published in the transaction of the saga step that makes
 * it true (the step's `ctx.transaction`), so an event exists exactly when its state change
 * committed. Keyed by invoice: a consumer sees one invoice's events in the order they happened.
 */
export const billingEvents = defineOutbox({
  topics: {
    'invoice.issued': z.object({
      invoiceId: z.string(),
      customerId: z.string(),
      number: z.string(),
      amountCents: z.number().int(),
    }),
    'invoice.paid': z.object({
      invoiceId: z.string(),
      amountCents: z.number().int(),
      creditCents: z.number().int(),
      cardCents: z.number().int(),
    }),
    'invoice.voided': z.object({ invoiceId: z.string(), reason: z.string().max(500) }),
  },
});

export const BILLING_TOPICS = ['invoice.issued', 'invoice.paid', 'invoice.voided'] as const;
export type BillingTopic = (typeof BILLING_TOPICS)[number];
