import type pg from 'pg';
import { PaymentDeclinedError } from '../errors.js';

/** What the provider's webhook tells the saga about a pending charge. */
export interface PaymentConfirmation {
  status: 'succeeded' | 'declined';
  declineCode?: string | null;
}

/** Applies the webhook's verdict: a late decline fails the step, so the saga compensates. */
export async function applyConfirmation(
  tx: pg.ClientBase,
  invoiceId: string,
  confirmation: PaymentConfirmation,
): Promise<void> {
  if (confirmation.status === 'declined') {
    throw new PaymentDeclinedError(invoiceId, confirmation.declineCode ?? 'declined_late');
  }
  await tx.query(
    `UPDATE billing.payments SET status = 'confirmed', updated_at = now()
      WHERE invoice_id = $1 AND status = 'pending'`,
    [invoiceId],
  );
}
