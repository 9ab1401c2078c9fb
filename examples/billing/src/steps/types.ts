import { z } from 'zod';

/** What a billing saga is started with: the invoice it settles. */
export const billingInput = z.object({
  invoiceId: z.string().min(1).max(64),
  customerId: z.string().min(1).max(64),
  amountCents: z.number().int().positive().max(100_000_000),
});

export type BillingInput = z.infer<typeof billingInput>;
