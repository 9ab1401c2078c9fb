import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import type { BillingInput } from './steps/types.js';

/** Writes a draft invoice in the caller's transaction; its saga starts in that same transaction. */
export async function insertDraftInvoice(
  tx: pg.ClientBase,
  invoice: { customerId: string; amountCents: number; id?: string },
): Promise<BillingInput> {
  const id = invoice.id ?? `inv_${randomBytes(6).toString('hex')}`;
  await tx.query(
    `INSERT INTO billing.invoices (id, customer_id, amount_cents) VALUES ($1, $2, $3)`,
    [id, invoice.customerId, invoice.amountCents],
  );
  return { invoiceId: id, customerId: invoice.customerId, amountCents: invoice.amountCents };
}
