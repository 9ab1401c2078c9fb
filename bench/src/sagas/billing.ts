import type pg from 'pg';

/** The three-step saga both engines run: the same tables, statements and decline rule. */
export interface BillingInput {
  n: number;
  amountCents: number;
  /** Every tenth charge is declined, and the invoice is then cancelled (the compensation). */
  decline: boolean;
}

export const BUSINESS_SCHEMA = `
CREATE SCHEMA billing;
CREATE TABLE billing.invoices (n int PRIMARY KEY, amount_cents int NOT NULL, status text NOT NULL);
CREATE TABLE billing.charges (n int PRIMARY KEY, amount_cents int NOT NULL);
CREATE TABLE billing.receipts (n int PRIMARY KEY, sent_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE billing.prepared (n int NOT NULL, branch text NOT NULL, PRIMARY KEY (n, branch));
`;

export class ChargeDeclinedError extends Error {
  constructor(n: number) {
    super(`charge ${n} declined`);
    this.name = 'ChargeDeclinedError';
  }
}

export const billingInput = (n: number): BillingInput => ({
  n,
  amountCents: 1_000 + (n % 100),
  decline: n % 10 === 9,
});

// Idempotent writes: a retried step finds its row and changes nothing.
export async function createInvoice(db: pg.Pool | pg.PoolClient, input: BillingInput) {
  await db.query(
    `INSERT INTO billing.invoices (n, amount_cents, status) VALUES ($1, $2, 'open') ON CONFLICT (n) DO NOTHING`,
    [input.n, input.amountCents],
  );
  return { invoice: input.n };
}

export async function charge(db: pg.Pool | pg.PoolClient, input: BillingInput) {
  if (input.decline) throw new ChargeDeclinedError(input.n);
  await db.query(
    'INSERT INTO billing.charges (n, amount_cents) VALUES ($1, $2) ON CONFLICT (n) DO NOTHING',
    [input.n, input.amountCents],
  );
  return { charged: input.amountCents };
}

export async function cancelInvoice(db: pg.Pool | pg.PoolClient, input: BillingInput) {
  await db.query(`UPDATE billing.invoices SET status = 'cancelled' WHERE n = $1`, [input.n]);
}

export async function sendReceipt(db: pg.Pool | pg.PoolClient, input: BillingInput) {
  await db.query('INSERT INTO billing.receipts (n) VALUES ($1) ON CONFLICT (n) DO NOTHING', [
    input.n,
  ]);
  return { receipt: input.n };
}

/** The fan-out workflow's four branches; `d` is declined where `charge` would be. */
export const BRANCHES = ['a', 'b', 'c', 'd'] as const;
export type BranchId = (typeof BRANCHES)[number];

export async function prepare(db: pg.Pool | pg.PoolClient, input: BillingInput, branch: BranchId) {
  if (branch === 'd' && input.decline) throw new ChargeDeclinedError(input.n);
  await db.query(
    'INSERT INTO billing.prepared (n, branch) VALUES ($1, $2) ON CONFLICT (n, branch) DO NOTHING',
    [input.n, branch],
  );
  return { branch };
}

export async function unprepare(
  db: pg.Pool | pg.PoolClient,
  input: BillingInput,
  branch: BranchId,
) {
  await db.query('DELETE FROM billing.prepared WHERE n = $1 AND branch = $2', [input.n, branch]);
}
