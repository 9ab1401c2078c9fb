import type pg from 'pg';
import { voidInvoice } from './issue-invoice.js';
import { releaseCredit } from './reserve-credit.js';

/** What the provider's webhook tells the saga about a pending charge. */
export interface PaymentConfirmation {
  status: 'succeeded' | 'declined';
  declineCode?: string | null;
}

/**
 * Applies the provider's verdict after the pivot, in the step's transaction. Succeeded: the
 * payment is confirmed. Declined late: no money moved, and the saga cannot go back, so it goes
 * forward to the same end a compensation would reach: the payment record voided, the credit
 * released, the invoice void. Idempotent: a retried attempt changes nothing more. `voided` is the
 * void reason when this call voided the invoice, else null.
 */
export async function settlePayment(
  tx: pg.ClientBase,
  invoiceId: string,
  confirmation: PaymentConfirmation,
): Promise<{ paid: boolean; voided: string | null }> {
  if (confirmation.status === 'succeeded') {
    await tx.query(
      `UPDATE billing.payments SET status = 'confirmed', updated_at = now()
        WHERE invoice_id = $1 AND status = 'pending'`,
      [invoiceId],
    );
    return { paid: true, voided: null };
  }
  const reason = `card declined late: ${confirmation.declineCode ?? 'declined'}`;
  await tx.query(
    `UPDATE billing.payments SET status = 'voided', updated_at = now()
      WHERE invoice_id = $1 AND status = 'pending'`,
    [invoiceId],
  );
  await releaseCredit(tx, invoiceId);
  return { paid: false, voided: (await voidInvoice(tx, invoiceId, reason)) ? reason : null };
}
