import type pg from 'pg';
import type { BillingInput } from './types.js';

/** Accounts of the double-entry ledger. */
export const Accounts = {
  /** Prepaid credit we owe customers (a liability): a debit spends it. */
  customerCredit: 'customer_credit',
  /** Money the card processor owes us. */
  cardClearing: 'card_clearing',
  revenue: 'revenue',
} as const;

/**
 * Books the paid invoice as one balanced journal (credit spent + card charged = revenue), captures
 * the reservation and marks the invoice paid, all in the step's transaction. Idempotent; `paid`
 * says whether this call marked it paid.
 */
export async function writeLedger(
  tx: pg.ClientBase,
  input: BillingInput,
  parts: { creditCents: number; cardCents: number },
): Promise<{ journalId: string; paid: boolean }> {
  const journalId = `journal:${input.invoiceId}`;
  const lines: [string, number, number][] = [];
  if (parts.creditCents > 0) lines.push([Accounts.customerCredit, parts.creditCents, 0]);
  if (parts.cardCents > 0) lines.push([Accounts.cardClearing, parts.cardCents, 0]);
  lines.push([Accounts.revenue, 0, input.amountCents]);
  await tx.query(
    `INSERT INTO billing.ledger_entries (journal_id, invoice_id, account, debit_cents, credit_cents)
     SELECT $1, $2, l.account, l.debit, l.credit
       FROM unnest($3::text[], $4::int[], $5::int[]) AS l(account, debit, credit)
     ON CONFLICT (journal_id, account) DO NOTHING`,
    [
      journalId,
      input.invoiceId,
      lines.map((l) => l[0]),
      lines.map((l) => l[1]),
      lines.map((l) => l[2]),
    ],
  );
  await tx.query(
    `UPDATE billing.credit_reservations SET status = 'captured', updated_at = now()
      WHERE invoice_id = $1 AND status = 'held'`,
    [input.invoiceId],
  );
  const { rowCount } = await tx.query(
    `UPDATE billing.invoices SET status = 'paid', settled_at = now()
      WHERE id = $1 AND status = 'open'`,
    [input.invoiceId],
  );
  return { journalId, paid: rowCount === 1 };
}
