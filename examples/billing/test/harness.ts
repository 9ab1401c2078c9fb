import { createWorker, type Worker } from '@skiplock/queue';
import type { SagaView } from '@skiplock/saga';
import type pg from 'pg';
import { pino } from 'pino';
import { afterEach } from 'vitest';
import { waitFor } from '../../../test/support/wait.js';
import { seedCustomers } from '../src/customers.js';
import { checkInvariants } from '../src/invariants.js';
import { migrateBilling } from '../src/migrate.js';
import {
  createBillingSystem,
  type BillingSystem,
  type BillingSystemOptions,
} from '../src/system.js';

export const silent = pino({ level: 'silent' });

const running: { worker: Worker; system: BillingSystem }[] = [];

// Each test runs its own system; stopping it first keeps its jobs from leaking into the next test.
afterEach(async () => {
  for (const { worker, system } of running.splice(0)) {
    await worker.stop({ timeoutMs: 1_000 });
    await system.runtime.close();
  }
});

export async function migrated(pool: pg.Pool): Promise<void> {
  await migrateBilling(pool, silent);
}

/** A billing system with an in-process worker; stopped after the test. */
export async function startBilling(
  pool: pg.Pool,
  options: Partial<Omit<BillingSystemOptions, 'pool'>> = {},
): Promise<BillingSystem> {
  const system = createBillingSystem({
    pool,
    logger: silent,
    rates: { declineRate: 0, transientRate: 0, lateConfirmRate: 0 },
    webhookDelayMs: 0,
    retry: { backoff: { baseMs: 10, maxMs: 100 } },
    ...options,
  });
  const worker = createWorker({
    pool,
    jobs: system.jobs,
    logger: silent,
    concurrency: 4,
    pollIntervalMs: 20,
    sweeper: false,
    retention: false,
  });
  await worker.start();
  running.push({ worker, system });
  return system;
}

const TERMINAL = ['completed', 'compensated', 'cancelled', 'failed'];

export function settled(system: BillingSystem, id: string, timeoutMs = 30_000): Promise<SagaView> {
  return waitFor(
    async () => {
      const saga = await system.runtime.getSaga(id);
      return saga && TERMINAL.includes(saga.status) ? saga : null;
    },
    { timeoutMs, what: `saga ${id} to finish` },
  );
}

let customerSeq = 0;

/** A customer of its own, with exactly `creditCents` of prepaid credit. */
export async function customerWith(pool: pg.Pool, creditCents: number): Promise<string> {
  customerSeq += 1;
  const id = `cus_t${customerSeq}_${Math.random().toString(36).slice(2, 8)}`;
  await pool.query(
    `INSERT INTO billing.customers (id, name, opening_balance_cents, balance_cents)
     VALUES ($1, 'Test customer', $2, $2)`,
    [id, creditCents],
  );
  return id;
}

export { seedCustomers };

export async function balanceOf(pool: pg.Pool, customerId: string): Promise<number> {
  const { rows } = await pool.query<{ balance_cents: number }>(
    'SELECT balance_cents FROM billing.customers WHERE id = $1',
    [customerId],
  );
  return rows[0]!.balance_cents;
}

export async function invoiceStatus(pool: pg.Pool, invoiceId: string): Promise<string> {
  const { rows } = await pool.query<{ status: string }>(
    'SELECT status FROM billing.invoices WHERE id = $1',
    [invoiceId],
  );
  return rows[0]!.status;
}

export async function providerCharges(
  pool: pg.Pool,
  invoiceId: string,
): Promise<{ status: string; calls: number; amount_cents: number }[]> {
  const { rows } = await pool.query<{ status: string; calls: number; amount_cents: number }>(
    'SELECT status, calls, amount_cents FROM billing.provider_charges WHERE invoice_id = $1',
    [invoiceId],
  );
  return rows;
}

/** Fails with the broken invariants named, so a failing test says which money rule broke. */
export async function expectInvariantsHold(pool: pg.Pool): Promise<void> {
  const broken = (await checkInvariants(pool)).filter((r) => !r.ok);
  if (broken.length > 0) {
    throw new Error(
      `money invariants broken: ${broken.map((b) => `${b.name} (${b.sample.join(', ')})`).join('; ')}`,
    );
  }
}
