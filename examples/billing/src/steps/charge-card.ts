import type pg from 'pg';
import { InvoiceStateError, PaymentDeclinedError } from '../errors.js';
import type { FakeProvider } from '../provider.js';
import type { BillingInput } from './types.js';

export interface ChargeResult {
  /** The idempotency key the provider knows this charge by; null when credit paid it all. */
  providerKey: string | null;
  cardCents: number;
  /** `pending`: the provider confirms later by webhook. */
  status: 'succeeded' | 'pending' | 'not_needed';
}

/**
 * The pivot: charges the card for what credit did not cover. The provider call carries the step's
 * stable idempotency key, so a retry after a lost answer returns the first charge instead of
 * charging again; our `payments` row is written in the step's transaction.
 */
export async function chargeCard(args: {
  provider: FakeProvider;
  tx: pg.ClientBase;
  idempotencyKey: string;
  input: BillingInput;
  creditCents: number;
}): Promise<ChargeResult> {
  const { provider, tx, idempotencyKey, input } = args;
  const cardCents = input.amountCents - args.creditCents;
  if (cardCents <= 0) return { providerKey: null, cardCents: 0, status: 'not_needed' };
  const outcome = await provider.charge(idempotencyKey, {
    invoiceId: input.invoiceId,
    customerId: input.customerId,
    amountCents: cardCents,
  });
  if (outcome.status === 'declined') {
    throw new PaymentDeclinedError(input.invoiceId, outcome.declineCode ?? 'declined');
  }
  if (outcome.status !== 'succeeded' && outcome.status !== 'pending') {
    throw new InvoiceStateError(`charge ${idempotencyKey} was already ${outcome.status}`);
  }
  await tx.query(
    `INSERT INTO billing.payments (invoice_id, customer_id, amount_cents, provider_key, status)
     VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (invoice_id) DO NOTHING`,
    [
      input.invoiceId,
      input.customerId,
      cardCents,
      idempotencyKey,
      outcome.status === 'pending' ? 'pending' : 'confirmed',
    ],
  );
  return { providerKey: idempotencyKey, cardCents, status: outcome.status };
}

/**
 * Compensation, reached only when the confirmation failed (late decline or timeout): voids the
 * pending charge at the provider, or refunds it if it succeeded meanwhile. Idempotent.
 */
export async function reverseCharge(args: {
  provider: FakeProvider;
  tx: pg.ClientBase;
  invoiceId: string;
  providerKey: string | null;
}): Promise<string | null> {
  if (!args.providerKey) return null;
  const status = await args.provider.reverse(args.providerKey);
  await args.tx.query(
    `UPDATE billing.payments SET status = $2, updated_at = now()
      WHERE invoice_id = $1 AND status IN ('pending', 'confirmed')`,
    [args.invoiceId, status === 'refunded' ? 'refunded' : 'voided'],
  );
  return status;
}
