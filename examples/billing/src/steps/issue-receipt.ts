import type pg from 'pg';

/** Records the receipt (retriable: a second attempt finds the first one's row). */
export async function issueReceipt(
  tx: pg.ClientBase,
  invoiceId: string,
): Promise<{ receiptNumber: string }> {
  const number = `RCPT-${invoiceId}`;
  await tx.query(
    `INSERT INTO billing.receipts (invoice_id, number) VALUES ($1, $2)
     ON CONFLICT (invoice_id) DO NOTHING`,
    [invoiceId, number],
  );
  return { receiptNumber: number };
}
