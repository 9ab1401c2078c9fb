import type pg from 'pg';

/**
 * The money invariants, as SQL that returns the id of every row that breaks one. The tests and the
 * demo's summary run these same checks. They hold at rest: while a saga is between steps its
 * reservation may be held and its charge pending, which the checks allow.
 */
export interface Invariant {
  name: string;
  /** What holds, in one line. */
  rule: string;
  /** Selects one text column, `what`: the offending row's id. */
  violations: string;
}

export const invariants: readonly Invariant[] = [
  {
    name: 'no payment without an invoice',
    rule: 'every live provider charge and payment belongs to an existing invoice that is not void',
    violations: `
      SELECT pc.idempotency_key AS what
        FROM billing.provider_charges pc
        LEFT JOIN billing.invoices i ON i.id = pc.invoice_id
       WHERE pc.status IN ('succeeded', 'pending') AND (i.id IS NULL OR i.status = 'void')
      UNION ALL
      SELECT p.provider_key
        FROM billing.payments p JOIN billing.invoices i ON i.id = p.invoice_id
       WHERE p.status IN ('confirmed', 'pending') AND i.status = 'void'`,
  },
  {
    name: 'no customer charged twice',
    rule: 'at most one live charge per invoice; credit plus card never exceeds it, and equals it once paid',
    violations: `
      SELECT invoice_id AS what
        FROM billing.provider_charges
       WHERE status IN ('succeeded', 'pending')
       GROUP BY invoice_id HAVING count(*) > 1
      UNION ALL
      SELECT i.id
        FROM billing.invoices i
        LEFT JOIN (SELECT invoice_id, sum(amount_cents) AS cents
                     FROM billing.provider_charges WHERE status = 'succeeded'
                    GROUP BY invoice_id) card ON card.invoice_id = i.id
        LEFT JOIN billing.credit_reservations r
               ON r.invoice_id = i.id AND r.status IN ('held', 'captured')
       WHERE COALESCE(card.cents, 0) + COALESCE(r.amount_cents, 0) > i.amount_cents
          OR (i.status = 'paid'
              AND COALESCE(card.cents, 0) + COALESCE(r.amount_cents, 0) <> i.amount_cents)`,
  },
  {
    name: 'compensated sagas restore balances',
    rule: 'balance = opening − held/captured credit; a void invoice keeps no credit, charge or ledger line',
    violations: `
      SELECT c.id AS what
        FROM billing.customers c
        LEFT JOIN (SELECT customer_id, sum(amount_cents) AS cents
                     FROM billing.credit_reservations WHERE status IN ('held', 'captured')
                    GROUP BY customer_id) r ON r.customer_id = c.id
       WHERE c.balance_cents <> c.opening_balance_cents - COALESCE(r.cents, 0)
      UNION ALL
      SELECT i.id
        FROM billing.invoices i
       WHERE i.status = 'void'
         AND (EXISTS (SELECT 1 FROM billing.credit_reservations r
                       WHERE r.invoice_id = i.id AND r.status <> 'released')
              OR EXISTS (SELECT 1 FROM billing.provider_charges pc
                          WHERE pc.invoice_id = i.id AND pc.status IN ('succeeded', 'pending'))
              OR EXISTS (SELECT 1 FROM billing.ledger_entries l WHERE l.invoice_id = i.id))`,
  },
  {
    name: 'ledger entries balance',
    rule: 'every journal debits what it credits; every paid invoice has its revenue booked',
    violations: `
      SELECT journal_id AS what
        FROM billing.ledger_entries
       GROUP BY journal_id HAVING sum(debit_cents) <> sum(credit_cents)
      UNION ALL
      SELECT i.id
        FROM billing.invoices i
       WHERE i.status = 'paid'
         AND NOT EXISTS (SELECT 1 FROM billing.ledger_entries l
                          WHERE l.invoice_id = i.id AND l.account = 'revenue'
                            AND l.credit_cents = i.amount_cents)`,
  },
];

export interface InvariantResult {
  name: string;
  rule: string;
  ok: boolean;
  violationCount: number;
  /** Up to five offending ids, for the message. */
  sample: string[];
}

export async function checkInvariants(db: pg.Pool | pg.ClientBase): Promise<InvariantResult[]> {
  const results: InvariantResult[] = [];
  for (const invariant of invariants) {
    const { rows } = await db.query<{ n: string; sample: string[] | null }>(
      `SELECT count(*) AS n, (array_agg(what ORDER BY what))[1:5] AS sample
         FROM (${invariant.violations}) v`,
    );
    const n = Number(rows[0]?.n ?? 0);
    results.push({
      name: invariant.name,
      rule: invariant.rule,
      ok: n === 0,
      violationCount: n,
      sample: rows[0]?.sample ?? [],
    });
  }
  return results;
}
