import { sql } from 'drizzle-orm';
import {
  bigserial,
  check,
  index,
  integer,
  pgSchema,
  text,
  timestamp,
  unique,
} from 'drizzle-orm/pg-core';

/** The example's business tables live apart from the library's `skiplock` schema. */
export const billingSchema = pgSchema('billing');

/**
 * `balance_cents` is prepaid credit the customer can spend on invoices; `opening_balance_cents`
 * never changes, so the invariants can prove every cent of difference is a captured reservation.
 */
export const customers = billingSchema.table(
  'customers',
  {
    id: text('id').primaryKey(),
    name: text('name').notNull(),
    openingBalanceCents: integer('opening_balance_cents').notNull(),
    balanceCents: integer('balance_cents').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    check('customers_balance_check', sql`${t.balanceCents} >= 0`),
    check('customers_opening_balance_check', sql`${t.openingBalanceCents} >= 0`),
  ],
);

/**
 * Invoice lifecycle: `draft` (created with its saga in one transaction) → `open` (issued) →
 * `paid` (ledger written) or `void` (the saga compensated).
 */
export const invoiceStatus = billingSchema.enum('invoice_status', [
  'draft',
  'open',
  'paid',
  'void',
]);

export const invoices = billingSchema.table(
  'invoices',
  {
    id: text('id').primaryKey(),
    customerId: text('customer_id')
      .notNull()
      .references(() => customers.id),
    amountCents: integer('amount_cents').notNull(),
    status: invoiceStatus('status').notNull().default('draft'),
    number: text('number').unique(),
    voidReason: text('void_reason'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    /** When the invoice reached `paid` or `void`; the demo's saga latency is settled − created. */
    settledAt: timestamp('settled_at', { withTimezone: true }),
  },
  (t) => [
    check('invoices_amount_check', sql`${t.amountCents} > 0`),
    index('invoices_status_idx').on(t.status),
  ],
);

/** `held` while the saga runs, then `captured` (paid) or `released` (compensated). */
export const reservationStatus = billingSchema.enum('reservation_status', [
  'held',
  'captured',
  'released',
]);

/** Credit set aside for one invoice; at most one per invoice. */
export const creditReservations = billingSchema.table(
  'credit_reservations',
  {
    id: bigserial('id', { mode: 'bigint' }).primaryKey(),
    invoiceId: text('invoice_id')
      .notNull()
      .unique()
      .references(() => invoices.id),
    customerId: text('customer_id')
      .notNull()
      .references(() => customers.id),
    amountCents: integer('amount_cents').notNull(),
    status: reservationStatus('status').notNull().default('held'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [check('credit_reservations_amount_check', sql`${t.amountCents} >= 0`)],
);

/**
 * Our record of the card part of an invoice. `pending` until the provider confirms; `voided` or
 * `refunded` when the saga compensates after the charge.
 */
export const paymentStatus = billingSchema.enum('payment_status', [
  'pending',
  'confirmed',
  'voided',
  'refunded',
]);

export const payments = billingSchema.table(
  'payments',
  {
    id: bigserial('id', { mode: 'bigint' }).primaryKey(),
    // One payment per invoice: a second charge for the same invoice cannot even be recorded.
    invoiceId: text('invoice_id')
      .notNull()
      .unique()
      .references(() => invoices.id),
    customerId: text('customer_id')
      .notNull()
      .references(() => customers.id),
    amountCents: integer('amount_cents').notNull(),
    providerKey: text('provider_key').notNull().unique(),
    status: paymentStatus('status').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [check('payments_amount_check', sql`${t.amountCents} > 0`)],
);

export const receipts = billingSchema.table('receipts', {
  invoiceId: text('invoice_id')
    .primaryKey()
    .references(() => invoices.id),
  number: text('number').notNull().unique(),
  issuedAt: timestamp('issued_at', { withTimezone: true }).notNull().defaultNow(),
});

/**
 * Double-entry ledger: one journal per paid invoice, each line a debit or a credit on one account.
 * A journal balances when its debits equal its credits (checked by the invariants).
 */
export const ledgerEntries = billingSchema.table(
  'ledger_entries',
  {
    id: bigserial('id', { mode: 'bigint' }).primaryKey(),
    journalId: text('journal_id').notNull(),
    invoiceId: text('invoice_id')
      .notNull()
      .references(() => invoices.id),
    account: text('account').notNull(),
    debitCents: integer('debit_cents').notNull().default(0),
    creditCents: integer('credit_cents').notNull().default(0),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    unique('ledger_entries_journal_account_unique').on(t.journalId, t.account),
    index('ledger_entries_invoice_idx').on(t.invoiceId),
    check(
      'ledger_entries_one_side_check',
      sql`${t.debitCents} >= 0 AND ${t.creditCents} >= 0 AND (${t.debitCents} = 0) <> (${t.creditCents} = 0)`,
    ),
  ],
);

/**
 * The fake payment provider's own table: it stands for an external system, so it has no foreign
 * keys into ours; `invoice_id` is only the merchant reference we sent. Keyed by the idempotency key
 * we pass, so a retried charge returns the first outcome instead of charging again.
 */
export const providerChargeStatus = billingSchema.enum('provider_charge_status', [
  'succeeded',
  'pending',
  'declined',
  'voided',
  'refunded',
]);

export const providerCharges = billingSchema.table(
  'provider_charges',
  {
    idempotencyKey: text('idempotency_key').primaryKey(),
    invoiceId: text('invoice_id').notNull(),
    customerId: text('customer_id').notNull(),
    amountCents: integer('amount_cents').notNull(),
    status: providerChargeStatus('status').notNull(),
    declineCode: text('decline_code'),
    /** How many charge calls carried this key; more than one means the provider saw a retry. */
    calls: integer('calls').notNull().default(1),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    index('provider_charges_invoice_idx').on(t.invoiceId),
    check('provider_charges_amount_check', sql`${t.amountCents} > 0`),
  ],
);
