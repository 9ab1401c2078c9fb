import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../../test/support/db.js';
import { checkInvariants } from '../src/invariants.js';
import { migrated } from './harness.js';

const db = await useTestDatabase();
beforeAll(() => migrated(db.pool));

// A consistent starting point: one customer, one paid invoice booked in a balanced journal.
beforeEach(async () => {
  await db.pool.query(`
    TRUNCATE billing.ledger_entries, billing.receipts, billing.payments,
             billing.credit_reservations, billing.provider_charges, billing.invoices,
             billing.customers;
    INSERT INTO billing.customers (id, name, opening_balance_cents, balance_cents)
      VALUES ('cus_a', 'A', 1000, 600);
    INSERT INTO billing.invoices (id, customer_id, amount_cents, status)
      VALUES ('inv_paid', 'cus_a', 1000, 'paid'), ('inv_void', 'cus_a', 500, 'void');
    INSERT INTO billing.credit_reservations (invoice_id, customer_id, amount_cents, status)
      VALUES ('inv_paid', 'cus_a', 400, 'captured'), ('inv_void', 'cus_a', 300, 'released');
    INSERT INTO billing.provider_charges
        (idempotency_key, invoice_id, customer_id, amount_cents, status)
      VALUES ('k_paid', 'inv_paid', 'cus_a', 600, 'succeeded'),
             ('k_void', 'inv_void', 'cus_a', 200, 'declined');
    INSERT INTO billing.payments (invoice_id, customer_id, amount_cents, provider_key, status)
      VALUES ('inv_paid', 'cus_a', 600, 'k_paid', 'confirmed');
    INSERT INTO billing.ledger_entries (journal_id, invoice_id, account, debit_cents, credit_cents)
      VALUES ('j', 'inv_paid', 'customer_credit', 400, 0), ('j', 'inv_paid', 'card_clearing', 600, 0),
             ('j', 'inv_paid', 'revenue', 0, 1000);
  `);
});

async function broken(): Promise<string[]> {
  return (await checkInvariants(db.pool)).filter((r) => !r.ok).map((r) => r.name);
}

describe('money invariants', () => {
  it('all hold on consistent books', async () => {
    expect(await broken()).toEqual([]);
  });

  it('catch a charge that outlived its voided invoice', async () => {
    await db.pool.query(
      `UPDATE billing.provider_charges SET status = 'succeeded' WHERE idempotency_key = 'k_void'`,
    );
    expect(await broken()).toEqual([
      'no payment without an invoice',
      'compensated sagas restore balances',
    ]);
  });

  it('catch a charge for an invoice that does not exist', async () => {
    await db.pool.query(`
      INSERT INTO billing.provider_charges (idempotency_key, invoice_id, customer_id, amount_cents, status)
      VALUES ('k_ghost', 'inv_ghost', 'cus_a', 100, 'succeeded')`);
    expect(await broken()).toEqual(['no payment without an invoice']);
  });

  it('catch a second charge for one invoice', async () => {
    await db.pool.query(`
      INSERT INTO billing.provider_charges (idempotency_key, invoice_id, customer_id, amount_cents, status)
      VALUES ('k_paid_again', 'inv_paid', 'cus_a', 600, 'succeeded')`);
    expect(await broken()).toEqual(['no customer charged twice']);
  });

  it('catch credit that a compensated saga did not give back', async () => {
    await db.pool.query(`UPDATE billing.customers SET balance_cents = 300 WHERE id = 'cus_a'`);
    expect(await broken()).toEqual(['compensated sagas restore balances']);
  });

  it('catch a journal that does not balance', async () => {
    await db.pool.query(
      `UPDATE billing.ledger_entries SET debit_cents = 500 WHERE account = 'card_clearing'`,
    );
    expect(await broken()).toEqual(['ledger entries balance']);
  });

  it('catch a paid invoice with no revenue booked', async () => {
    await db.pool.query(`DELETE FROM billing.ledger_entries`);
    expect(await broken()).toEqual(['ledger entries balance']);
  });
});
