import type pg from 'pg';
import { InvoiceStateError } from '../errors.js';
import type { BillingInput } from './types.js';

/**
 * Sets aside as much of the customer's prepaid credit as the invoice needs (all of it, some, or
 * none); the card pays the rest. The customer row is locked, so concurrent invoices of one customer
 * never spend the same credit. Runs in the step's transaction: it commits with the step or not at all.
 */
export async function reserveCredit(
  tx: pg.ClientBase,
  input: BillingInput,
): Promise<{ creditCents: number }> {
  const existing = await tx.query<{ amount_cents: number }>(
    'SELECT amount_cents FROM billing.credit_reservations WHERE invoice_id = $1',
    [input.invoiceId],
  );
  if (existing.rows[0]) return { creditCents: existing.rows[0].amount_cents };
  const { rows } = await tx.query<{ amount_cents: number }>(
    `WITH c AS (
       SELECT id, LEAST(balance_cents, $2::int) AS take
         FROM billing.customers WHERE id = $1 FOR UPDATE),
     u AS (
       UPDATE billing.customers cu SET balance_cents = cu.balance_cents - c.take
         FROM c WHERE cu.id = c.id RETURNING c.take)
     INSERT INTO billing.credit_reservations (invoice_id, customer_id, amount_cents)
     SELECT $3, $1, take FROM u
     RETURNING amount_cents`,
    [input.customerId, input.amountCents, input.invoiceId],
  );
  if (!rows[0]) throw new InvoiceStateError(`customer ${input.customerId} does not exist`);
  return { creditCents: rows[0].amount_cents };
}

/** Compensation: gives a held reservation back to the customer's balance. Idempotent. */
export async function releaseCredit(tx: pg.ClientBase, invoiceId: string): Promise<number> {
  const { rows } = await tx.query<{ amount_cents: number }>(
    `WITH r AS (
       UPDATE billing.credit_reservations SET status = 'released', updated_at = now()
        WHERE invoice_id = $1 AND status = 'held'
        RETURNING customer_id, amount_cents)
     UPDATE billing.customers c SET balance_cents = c.balance_cents + r.amount_cents
       FROM r WHERE c.id = r.customer_id
     RETURNING r.amount_cents`,
    [invoiceId],
  );
  return rows[0]?.amount_cents ?? 0;
}
