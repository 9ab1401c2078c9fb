import { beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../../test/support/db.js';
import { createFaults, type BillingStepName } from '../src/faults.js';
import { chargeKeyOf } from '../src/saga.js';
import {
  balanceOf,
  customerWith,
  expectInvariantsHold,
  invoiceStatus,
  migrated,
  providerCharges,
  settled,
  startBilling,
} from './harness.js';

const db = await useTestDatabase();
beforeAll(() => migrated(db.pool));

async function ledgerOf(invoiceId: string) {
  const { rows } = await db.pool.query<{ account: string; debit: number; credit: number }>(
    `SELECT account, debit_cents AS debit, credit_cents AS credit
       FROM billing.ledger_entries WHERE invoice_id = $1 ORDER BY account`,
    [invoiceId],
  );
  return rows;
}

/** The invoice's events in the outbox, in publish order, with their payloads. */
async function eventsOf(invoiceId: string) {
  const { rows } = await db.pool.query<{ topic: string; payload: Record<string, unknown> }>(
    `SELECT topic, payload FROM skiplock.outbox_messages WHERE key = $1 ORDER BY id`,
    [invoiceId],
  );
  return rows;
}

async function paymentStatus(invoiceId: string): Promise<string | null> {
  const { rows } = await db.pool.query<{ status: string }>(
    'SELECT status FROM billing.payments WHERE invoice_id = $1',
    [invoiceId],
  );
  return rows[0]?.status ?? null;
}

describe('billing saga', () => {
  it('completes: credit first, the card for the rest, one balanced journal', async () => {
    const system = await startBilling(db.pool);
    const customer = await customerWith(db.pool, 3_000);
    const id = await system.openInvoice({ customerId: customer, amountCents: 10_000 });
    const saga = await settled(system, id);
    expect(saga.status).toBe('completed');
    expect(saga.history.map((h) => h.step)).toEqual([
      'issue-invoice',
      'reserve-credit',
      'open-payment',
      'charge-card',
      'payment-confirmed',
      'settle-payment',
      'issue-receipt',
      'write-ledger',
    ]);
    expect(await invoiceStatus(db.pool, id)).toBe('paid');
    expect(await balanceOf(db.pool, customer)).toBe(0);
    expect(await providerCharges(db.pool, id)).toEqual([
      { status: 'succeeded', calls: 1, amount_cents: 7_000 },
    ]);
    expect(await paymentStatus(id)).toBe('confirmed');
    expect(await ledgerOf(id)).toEqual([
      { account: 'card_clearing', debit: 7_000, credit: 0 },
      { account: 'customer_credit', debit: 3_000, credit: 0 },
      { account: 'revenue', debit: 0, credit: 10_000 },
    ]);
    expect(await eventsOf(id)).toEqual([
      {
        topic: 'invoice.issued',
        payload: { invoiceId: id, customerId: customer, amountCents: 10_000, number: `INV-${id}` },
      },
      {
        topic: 'invoice.paid',
        payload: { invoiceId: id, amountCents: 10_000, creditCents: 3_000, cardCents: 7_000 },
      },
    ]);
    await expectInvariantsHold(db.pool);
  });

  it('never calls the provider when credit pays the whole invoice', async () => {
    const system = await startBilling(db.pool);
    const customer = await customerWith(db.pool, 50_000);
    const id = await system.openInvoice({ customerId: customer, amountCents: 12_345 });
    expect((await settled(system, id)).status).toBe('completed');
    expect(await providerCharges(db.pool, id)).toEqual([]);
    expect(await balanceOf(db.pool, customer)).toBe(50_000 - 12_345);
    await expectInvariantsHold(db.pool);
  });

  it('creates no invoice and starts no saga when the transaction rolls back', async () => {
    const system = await startBilling(db.pool);
    await expect(
      system.openInvoice({ customerId: 'cus_does_not_exist', amountCents: 100 }),
    ).rejects.toThrow(/foreign key/);
    const { rows } = await db.pool.query(
      `SELECT 1 FROM billing.invoices WHERE customer_id = 'cus_does_not_exist'`,
    );
    expect(rows).toEqual([]);
  });

  it.each<BillingStepName>(['issue-invoice', 'reserve-credit', 'open-payment', 'charge-card'])(
    'a permanent failure in %s compensates: invoice not payable, balance as it was, no charge',
    async (step) => {
      const system = await startBilling(db.pool, {
        faults: createFaults({ force: { step, kind: 'permanent' } }),
      });
      const customer = await customerWith(db.pool, 2_000);
      const id = await system.openInvoice({ customerId: customer, amountCents: 5_000 });
      const saga = await settled(system, id);
      expect(saga.status).toBe('compensated');
      expect(saga.history.find((h) => h.step === step && h.kind === 'step')?.status).toBe('failed');
      // An invoice that could not even be issued stays a draft: nothing was issued to void.
      expect(await invoiceStatus(db.pool, id)).toBe(step === 'issue-invoice' ? 'draft' : 'void');
      expect(await balanceOf(db.pool, customer)).toBe(2_000);
      // Only a completed `open-payment` leaves a voided tombstone; nothing was ever charged.
      const charges = await providerCharges(db.pool, id);
      expect(charges.filter((c) => c.status === 'succeeded' || c.status === 'pending')).toEqual([]);
      await expectInvariantsHold(db.pool);
    },
  );

  it('a declined card compensates: reservation released, invoice void', async () => {
    const system = await startBilling(db.pool, {
      rates: { declineRate: 1, transientRate: 0, lateConfirmRate: 0 },
    });
    const customer = await customerWith(db.pool, 1_500);
    const id = await system.openInvoice({ customerId: customer, amountCents: 4_000 });
    const saga = await settled(system, id);
    expect(saga.status).toBe('compensated');
    expect(saga.history.filter((h) => h.kind === 'compensation').map((h) => h.step)).toEqual([
      'open-payment',
      'reserve-credit',
      'issue-invoice',
    ]);
    expect(await invoiceStatus(db.pool, id)).toBe('void');
    expect(await balanceOf(db.pool, customer)).toBe(1_500);
    expect((await providerCharges(db.pool, id)).map((c) => c.status)).toEqual(['declined']);
    const events = await eventsOf(id);
    expect(events.map((e) => e.topic)).toEqual(['invoice.issued', 'invoice.voided']);
    expect(events[1]?.payload.reason).toContain('declined');
    await expectInvariantsHold(db.pool);
  });

  it('an answer lost after the charge is retried with the same key and charges once', async () => {
    let crashed = false;
    const system = await startBilling(db.pool, {
      // The worker "crashes" after the provider charged but before the step committed.
      sagaFaults: (point) => {
        if (point.step === 'charge-card' && point.phase === 'after' && !crashed) {
          crashed = true;
          throw new Error('crash after the charge');
        }
      },
    });
    const customer = await customerWith(db.pool, 0);
    const id = await system.openInvoice({ customerId: customer, amountCents: 2_500 });
    expect((await settled(system, id)).status).toBe('completed');
    expect(crashed).toBe(true);
    expect(await providerCharges(db.pool, id)).toEqual([
      { status: 'succeeded', calls: 2, amount_cents: 2_500 },
    ]);
    await expectInvariantsHold(db.pool);
  });

  it('a charge whose answer is lost on every attempt is refunded when the step gives up', async () => {
    const system = await startBilling(db.pool, {
      sagaFaults: (point) => {
        if (point.step === 'charge-card' && point.phase === 'after') {
          throw new Error('answer lost');
        }
      },
    });
    const customer = await customerWith(db.pool, 1_000);
    const id = await system.openInvoice({ customerId: customer, amountCents: 3_000 });
    const saga = await settled(system, id);
    expect(saga.status).toBe('compensated');
    expect(await providerCharges(db.pool, id)).toEqual([
      { status: 'refunded', calls: 8, amount_cents: 2_000 },
    ]);
    expect(await balanceOf(db.pool, customer)).toBe(1_000);
    expect(await invoiceStatus(db.pool, id)).toBe('void');
    await expectInvariantsHold(db.pool);
  });

  it('a charge confirmed later by webhook completes the saga', async () => {
    const system = await startBilling(db.pool, {
      rates: { declineRate: 0, transientRate: 0, lateConfirmRate: 1 },
    });
    const customer = await customerWith(db.pool, 0);
    const id = await system.openInvoice({ customerId: customer, amountCents: 900 });
    const saga = await settled(system, id);
    expect(saga.status).toBe('completed');
    expect(saga.signals.map((s) => s.name)).toEqual(['payment-confirmed']);
    expect(await providerCharges(db.pool, id)).toEqual([
      { status: 'succeeded', calls: 1, amount_cents: 900 },
    ]);
    expect(await paymentStatus(id)).toBe('confirmed');
    await expectInvariantsHold(db.pool);
  });

  it('a late decline by webhook, after the pivot, voids the invoice going forward', async () => {
    const system = await startBilling(db.pool, {
      rates: { declineRate: 1, transientRate: 0, lateConfirmRate: 1 },
    });
    const customer = await customerWith(db.pool, 700);
    const id = await system.openInvoice({ customerId: customer, amountCents: 2_000 });
    const saga = await settled(system, id);
    // Past the pivot nothing is compensated: the saga completes, having settled the decline.
    expect(saga.status).toBe('completed');
    expect(saga.history.filter((h) => h.kind === 'compensation')).toEqual([]);
    const outputs = Object.fromEntries(saga.history.map((h) => [h.step, h.output]));
    expect(outputs).toMatchObject({
      'settle-payment': { paid: false },
      'issue-receipt': null,
      'write-ledger': null,
    });
    expect((await providerCharges(db.pool, id)).map((c) => c.status)).toEqual(['declined']);
    expect(await paymentStatus(id)).toBe('voided');
    expect(await invoiceStatus(db.pool, id)).toBe('void');
    expect(await balanceOf(db.pool, customer)).toBe(700);
    expect(await ledgerOf(id)).toEqual([]);
    const events = await eventsOf(id);
    expect(events.map((e) => e.topic)).toEqual(['invoice.issued', 'invoice.voided']);
    expect(events[1]?.payload.reason).toMatch(/^card declined late: /);
    await expectInvariantsHold(db.pool);
  });

  it('no webhook before the timeout: past the pivot the saga fails for an operator, whose retry takes the late webhook', async () => {
    const system = await startBilling(db.pool, {
      rates: { declineRate: 0, transientRate: 0, lateConfirmRate: 1 },
      webhookDelayMs: 600_000,
      random: () => 0.5,
      confirmTimeoutMs: 300,
    });
    const customer = await customerWith(db.pool, 0);
    const id = await system.openInvoice({ customerId: customer, amountCents: 1_100 });
    const failed = await settled(system, id);
    expect(failed.status).toBe('failed');
    expect(failed.error).toMatch(/payment-confirmed/);
    expect(failed.history.find((h) => h.step === 'payment-confirmed')?.status).toBe('failed');
    // Nothing was undone: the charge stays pending at the provider, the invoice open.
    expect((await providerCharges(db.pool, id)).map((c) => c.status)).toEqual(['pending']);
    expect(await paymentStatus(id)).toBe('pending');
    expect(await invoiceStatus(db.pool, id)).toBe('open');
    await expectInvariantsHold(db.pool);
    // The provider's verdict arrives while the saga is failed: kept for the wait.
    const verdict = await system.provider.confirm(chargeKeyOf(id));
    expect(verdict?.status).toBe('succeeded');
    expect(await system.runtime.signal(id, 'payment-confirmed', { status: 'succeeded' })).toEqual({
      delivered: true,
      resumed: false,
    });
    expect(await system.runtime.retryFailed(id)).toMatchObject({
      retried: true,
      step: 'payment-confirmed',
    });
    expect((await settled(system, id)).status).toBe('completed');
    expect(await invoiceStatus(db.pool, id)).toBe('paid');
    expect(await paymentStatus(id)).toBe('confirmed');
    await expectInvariantsHold(db.pool);
  });

  it('a permanent failure at the pivot (the charge) undoes everything and voids the charge key', async () => {
    const system = await startBilling(db.pool, {
      faults: createFaults({ force: { step: 'charge-card', kind: 'permanent' } }),
    });
    const customer = await customerWith(db.pool, 400);
    const id = await system.openInvoice({ customerId: customer, amountCents: 1_000 });
    expect((await settled(system, id)).status).toBe('compensated');
    // Nothing was charged; the voided record stops a straggling attempt from charging later.
    expect((await providerCharges(db.pool, id)).map((c) => c.status)).toEqual(['voided']);
    expect(await balanceOf(db.pool, customer)).toBe(400);
    expect(await invoiceStatus(db.pool, id)).toBe('void');
    await expectInvariantsHold(db.pool);
  });

  it.each<BillingStepName>(['settle-payment', 'issue-receipt', 'write-ledger'])(
    'transient failures in %s (after the pivot) are retried until the saga completes',
    async (step) => {
      const system = await startBilling(db.pool, {
        faults: createFaults({ force: { step, kind: 'transient', times: 3 } }),
      });
      const customer = await customerWith(db.pool, 100);
      const id = await system.openInvoice({ customerId: customer, amountCents: 600 });
      const saga = await settled(system, id);
      expect(saga.status).toBe('completed');
      expect(saga.history.find((h) => h.step === step)?.attempts).toBe(4);
      expect(await invoiceStatus(db.pool, id)).toBe('paid');
      await expectInvariantsHold(db.pool);
    },
  );

  it('concurrent invoices of one customer never spend the same credit twice', async () => {
    const system = await startBilling(db.pool, {
      rates: { declineRate: 0.3, transientRate: 0.2, lateConfirmRate: 0.3 },
    });
    const customer = await customerWith(db.pool, 5_000);
    const ids = await Promise.all(
      Array.from({ length: 12 }, () =>
        system.openInvoice({ customerId: customer, amountCents: 1_000 }),
      ),
    );
    const sagas = await Promise.all(ids.map((id) => settled(system, id, 45_000)));
    expect(sagas.every((s) => s.status === 'completed' || s.status === 'compensated')).toBe(true);
    await expectInvariantsHold(db.pool);
  });

  // What a SIGKILL does between a step's code and its commit: the code ran, nothing committed.
  it.each([
    'issue-invoice',
    'reserve-credit',
    'open-payment',
    'charge-card',
    'settle-payment',
    'issue-receipt',
    'write-ledger',
  ])(
    'a crash after %s ran but before it committed re-runs it without double effects',
    async (step) => {
      let crashes = 0;
      const system = await startBilling(db.pool, {
        sagaFaults: (point) => {
          if (
            point.step === step &&
            point.kind === 'step' &&
            point.phase === 'after' &&
            crashes === 0
          ) {
            crashes += 1;
            throw new Error(`crash after ${step}`);
          }
        },
      });
      const customer = await customerWith(db.pool, 1_200);
      const id = await system.openInvoice({ customerId: customer, amountCents: 3_000 });
      const saga = await settled(system, id);
      expect(crashes).toBe(1);
      expect(saga.status).toBe('completed');
      expect(saga.history.find((h) => h.step === step)?.attempts).toBe(2);
      expect(await balanceOf(db.pool, customer)).toBe(0);
      expect((await providerCharges(db.pool, id)).map((c) => c.status)).toEqual(['succeeded']);
      await expectInvariantsHold(db.pool);
    },
  );

  it.each(['issue-invoice', 'reserve-credit', 'open-payment'])(
    'a crash after the compensation of %s ran re-runs it without double effects',
    async (step) => {
      let crashes = 0;
      const system = await startBilling(db.pool, {
        faults: createFaults({ force: { step: 'charge-card', kind: 'permanent' } }),
        sagaFaults: (point) => {
          if (
            point.step === step &&
            point.kind === 'compensation' &&
            point.phase === 'after' &&
            crashes === 0
          ) {
            crashes += 1;
            throw new Error(`crash after undoing ${step}`);
          }
        },
      });
      const customer = await customerWith(db.pool, 800);
      const id = await system.openInvoice({ customerId: customer, amountCents: 2_000 });
      const saga = await settled(system, id);
      expect(crashes).toBe(1);
      expect(saga.status).toBe('compensated');
      expect(saga.history.find((h) => h.step === step && h.kind === 'compensation')?.attempts).toBe(
        2,
      );
      expect(await balanceOf(db.pool, customer)).toBe(800);
      expect(await invoiceStatus(db.pool, id)).toBe('void');
      expect((await providerCharges(db.pool, id)).map((c) => c.status)).toEqual(['voided']);
      await expectInvariantsHold(db.pool);
    },
  );
});
