import type pg from 'pg';
import { InvoiceStateError, PaymentDeclinedError } from '../errors.js';
import type { ChargeRequest, FakeProvider } from '../provider.js';
import type { BillingInput } from './types.js';

/** How the invoice is paid: credit covers what it can, the card the rest. */
export interface PaymentPlan {
  cardCents: number;
  /** The key the card charge is made under; null when credit paid it all. */
  providerKey: string | null;
}

export function chargeRequest(input: BillingInput, cardCents: number): ChargeRequest {
  return { invoiceId: input.invoiceId, customerId: input.customerId, amountCents: cardCents };
}

/**
 * The external call of the charge step. It carries the step's stable idempotency key, so a retry
 * after a lost answer gets the first charge's outcome back instead of charging again. A decline is
 * a business outcome and fails the step for good.
 */
export async function chargeCard(
  provider: FakeProvider,
  key: string,
  request: ChargeRequest,
): Promise<'succeeded' | 'pending'> {
  const outcome = await provider.charge(key, request);
  if (outcome.status === 'declined') {
    throw new PaymentDeclinedError(request.invoiceId, outcome.declineCode ?? 'declined');
  }
  if (outcome.status !== 'succeeded' && outcome.status !== 'pending') {
    // Reversed before this attempt got through (its saga is already compensating).
    throw new InvoiceStateError(`charge ${key} was already ${outcome.status}`);
  }
  return outcome.status;
}

/** Our record of the card payment, written in the charge step's transaction. */
export async function recordPayment(
  tx: pg.ClientBase,
  key: string,
  request: ChargeRequest,
  status: 'succeeded' | 'pending',
): Promise<void> {
  await tx.query(
    `INSERT INTO billing.payments (invoice_id, customer_id, amount_cents, provider_key, status)
     VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (invoice_id) DO NOTHING`,
    [
      request.invoiceId,
      request.customerId,
      request.amountCents,
      key,
      status === 'pending' ? 'pending' : 'confirmed',
    ],
  );
}

/**
 * Compensation of the payment: voids a pending charge or refunds a succeeded one, and leaves a
 * voided record when none was made, so a straggling attempt can no longer charge under that key.
 * Runs whether the charge step completed or failed for good. Idempotent.
 */
export async function reverseCharge(
  provider: FakeProvider,
  tx: pg.ClientBase,
  key: string,
  request: ChargeRequest,
): Promise<string> {
  const status = await provider.reverse(key, request);
  await tx.query(
    `UPDATE billing.payments SET status = $2, updated_at = now()
      WHERE invoice_id = $1 AND status IN ('pending', 'confirmed')`,
    [request.invoiceId, status === 'refunded' ? 'refunded' : 'voided'],
  );
  return status;
}
