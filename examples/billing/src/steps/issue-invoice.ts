import type pg from 'pg';
import { InvoiceStateError } from '../errors.js';

/** Moves the invoice from draft to open and gives it its number. Runs in the step's transaction. */
export async function issueInvoice(
  tx: pg.ClientBase,
  invoiceId: string,
): Promise<{ number: string }> {
  const { rows } = await tx.query<{ number: string }>(
    `UPDATE billing.invoices
        SET status = 'open', number = COALESCE(number, 'INV-' || id)
      WHERE id = $1 AND status IN ('draft', 'open')
      RETURNING number`,
    [invoiceId],
  );
  if (!rows[0]) throw new InvoiceStateError(`invoice ${invoiceId} is missing or already settled`);
  return { number: rows[0].number };
}

/**
 * Compensation: the invoice is void, with the reason the saga gave up. Idempotent; true when this
 * call voided it.
 */
export async function voidInvoice(
  tx: pg.ClientBase,
  invoiceId: string,
  reason: string,
): Promise<boolean> {
  const { rowCount } = await tx.query(
    `UPDATE billing.invoices
        SET status = 'void', void_reason = left($2, 500), settled_at = now()
      WHERE id = $1 AND status IN ('draft', 'open')`,
    [invoiceId, reason],
  );
  return rowCount === 1;
}
