import { defineSaga, type RetryPolicy } from '@skiplock/saga';
import type pg from 'pg';
import { z } from 'zod';
import { InvoiceStateError, PaymentDeclinedError } from './errors.js';
import { billingEvents } from './events.js';
import { InjectedPermanentError, noFaults, type Faults } from './faults.js';
import type { FakeProvider } from './provider.js';
import {
  chargeCard,
  chargeRequest,
  recordPayment,
  reverseCharge,
  type PaymentPlan,
} from './steps/charge-card.js';
import { settlePayment } from './steps/settle-payment.js';
import { issueInvoice, voidInvoice } from './steps/issue-invoice.js';
import { issueReceipt } from './steps/issue-receipt.js';
import { releaseCredit, reserveCredit } from './steps/reserve-credit.js';
import { billingInput } from './steps/types.js';
import { writeLedger } from './steps/write-ledger.js';

export const BILLING_SAGA = 'billing';
/** The signal that tells the saga the card charge is final (from the provider or the charge). */
export const PAYMENT_CONFIRMED = 'payment-confirmed';

export const paymentConfirmation = z.object({
  status: z.enum(['succeeded', 'declined']),
  declineCode: z.string().nullable().default(null),
});
export type PaymentConfirmationSignal = z.input<typeof paymentConfirmation>;

export interface BillingDeps {
  provider: FakeProvider;
  faults?: Faults;
  /** How long the saga waits for the provider's webhook before it voids the charge. */
  confirmTimeoutMs: number;
  /**
   * Delivers `PAYMENT_CONFIRMED` to a saga inside the given transaction. The charge step calls it
   * when the provider's answer is already final, so the signal commits with the step; the saga
   * keeps it until its wait step takes it.
   */
  confirm(tx: pg.PoolClient, sagaId: string, payload: PaymentConfirmationSignal): Promise<void>;
  /** Retry timing of every step (the demo shortens it; leases short enough to see kill -9 heal). */
  retry?: Pick<RetryPolicy, 'backoff' | 'leaseMs'>;
}

/**
 * The key the charge step's job runs under: the saga package's `saga:<id>:<step>`, where `<id>` is
 * the saga id with `%`, `:` and every character outside printable ASCII percent-encoded.
 */
export function chargeKeyOf(sagaId: string): string {
  return `saga:${sagaId.replace(/[^\x21-\x24\x26-\x39\x3b-\x7e]/gu, encodeURIComponent)}:charge-card`;
}

/**
 * The billing saga. Order matters: everything before the pivot can be undone, everything after it
 * only moves forward.
 *
 *   issue-invoice     draft → open                      undo: void the invoice
 *   reserve-credit    hold prepaid credit               undo: release it
 *   open-payment      split credit / card, fix the key  undo: void or refund the card charge
 *   charge-card       PIVOT: the card is charged (or the charge accepted, pending); a decline
 *                     here fails the pivot and undoes all; after it, no way back
 *   payment-confirmed wait for the provider's verdict (webhook), after the pivot: a timeout
 *                     fails the saga for an operator (reason wait_expired_after_pivot)
 *   settle-payment    retriable: confirm the payment, or, declined late, void the invoice and
 *                     release the credit going forward (nothing was taken, nothing to refund)
 *   issue-receipt     retriable, when paid
 *   write-ledger      retriable, when paid: the balanced journal, reservation captured, paid
 *
 * The card charge's undo sits on `open-payment`, before the charge, so it also runs when the
 * charge step itself fails for good after a charge went through (an answer lost on every retry).
 */
export function createBillingSaga(deps: BillingDeps) {
  const { provider } = deps;
  const faults = deps.faults ?? noFaults;
  const policy: RetryPolicy = { maxAttempts: 8, ...deps.retry };
  // Compensations get more attempts: giving up on one leaves the saga `failed`, for an operator.
  const compensation: RetryPolicy = { maxAttempts: 20, ...deps.retry };
  const permanent = [InvoiceStateError, InjectedPermanentError];

  // The saga's lease also covers the jobs no step options reach: the wait for the provider's
  // webhook and its timeout.
  return defineSaga({
    name: BILLING_SAGA,
    version: 2,
    input: billingInput,
    leaseMs: deps.retry?.leaseMs,
  })
    .step('issue-invoice', {
      ...policy,
      compensation,
      nonRetryable: permanent,
      run: async (ctx, input) => {
        faults.check('issue-invoice', ctx.attempt);
        return ctx.transaction(async (tx) => {
          const issued = await issueInvoice(tx, input.invoiceId);
          await billingEvents.publish(tx, {
            topic: 'invoice.issued',
            key: input.invoiceId,
            payload: { ...input, number: issued.number },
          });
          return issued;
        });
      },
      compensate: (ctx) =>
        ctx.transaction(async (tx) => {
          const { invoiceId } = ctx.input;
          const reason = ctx.reason.slice(0, 500);
          if (await voidInvoice(tx, invoiceId, reason)) {
            await billingEvents.publish(tx, {
              topic: 'invoice.voided',
              key: invoiceId,
              payload: { invoiceId, reason },
            });
          }
        }),
    })
    .step('reserve-credit', {
      ...policy,
      compensation,
      nonRetryable: permanent,
      run: async (ctx, input) => {
        faults.check('reserve-credit', ctx.attempt);
        return ctx.transaction((tx) => reserveCredit(tx, input));
      },
      compensate: async (ctx) => ({
        releasedCents: await ctx.transaction((tx) => releaseCredit(tx, ctx.input.invoiceId)),
      }),
    })
    .step('open-payment', {
      ...policy,
      compensation,
      nonRetryable: permanent,
      run: (ctx, input): PaymentPlan => {
        faults.check('open-payment', ctx.attempt);
        const cardCents = input.amountCents - ctx.steps['reserve-credit'].creditCents;
        return { cardCents, providerKey: cardCents > 0 ? chargeKeyOf(ctx.sagaId) : null };
      },
      compensate: async (ctx, plan) => {
        if (!plan.providerKey) return { card: 'none' };
        const request = chargeRequest(ctx.input, plan.cardCents);
        const key = plan.providerKey;
        return { card: await ctx.transaction((tx) => reverseCharge(provider, tx, key, request)) };
      },
    })
    .step('charge-card', {
      ...policy,
      // The point of no return: once the provider took the charge (or accepted it, pending),
      // the saga only goes forward. A decline here fails the pivot itself: everything undone.
      pivot: true,
      nonRetryable: [PaymentDeclinedError, ...permanent],
      run: async (ctx, input) => {
        faults.check('charge-card', ctx.attempt);
        const plan = ctx.steps['open-payment'];
        if (!plan.providerKey) {
          await ctx.transaction((tx) => deps.confirm(tx, ctx.sagaId, { status: 'succeeded' }));
          return { status: 'not_needed' as const };
        }
        if (ctx.idempotencyKey !== plan.providerKey) {
          throw new InvoiceStateError(`charge key ${ctx.idempotencyKey} is not the planned one`);
        }
        const request = chargeRequest(input, plan.cardCents);
        const status = await chargeCard(provider, ctx.idempotencyKey, request);
        await ctx.transaction(async (tx) => {
          await recordPayment(tx, ctx.idempotencyKey, request, status);
          // A charge that succeeded outright is its own confirmation, committed with the step; a
          // pending one waits for the provider's webhook.
          if (status === 'succeeded') await deps.confirm(tx, ctx.sagaId, { status: 'succeeded' });
        });
        return { status };
      },
    })
    .waitFor(PAYMENT_CONFIRMED, {
      payload: paymentConfirmation,
      timeoutMs: deps.confirmTimeoutMs,
    })
    .step('settle-payment', {
      ...deps.retry,
      retriable: true,
      run: async (ctx, input) => {
        faults.check('settle-payment', ctx.attempt);
        const confirmation = ctx.steps[PAYMENT_CONFIRMED];
        return ctx.transaction(async (tx) => {
          const settled = await settlePayment(tx, input.invoiceId, confirmation);
          if (settled.voided) {
            await billingEvents.publish(tx, {
              topic: 'invoice.voided',
              key: input.invoiceId,
              payload: { invoiceId: input.invoiceId, reason: settled.voided },
            });
          }
          return { paid: settled.paid };
        });
      },
    })
    .step('issue-receipt', {
      ...deps.retry,
      retriable: true,
      run: async (ctx, input) => {
        faults.check('issue-receipt', ctx.attempt);
        if (!ctx.steps['settle-payment'].paid) return null;
        return ctx.transaction((tx) => issueReceipt(tx, input.invoiceId));
      },
    })
    .step('write-ledger', {
      ...deps.retry,
      retriable: true,
      run: async (ctx, input) => {
        faults.check('write-ledger', ctx.attempt);
        if (!ctx.steps['settle-payment'].paid) return null;
        const creditCents = ctx.steps['reserve-credit'].creditCents;
        const cardCents = ctx.steps['open-payment'].cardCents;
        return ctx.transaction(async (tx) => {
          const { journalId, paid } = await writeLedger(tx, input, { creditCents, cardCents });
          // Published by the transaction that marks the invoice paid, and only by it: one
          // `invoice.paid` per paid invoice, however often the step is retried.
          if (paid) {
            await billingEvents.publish(tx, {
              topic: 'invoice.paid',
              key: input.invoiceId,
              payload: {
                invoiceId: input.invoiceId,
                amountCents: input.amountCents,
                creditCents,
                cardCents,
              },
            });
          }
          return { journalId };
        });
      },
    });
}

export type BillingSaga = ReturnType<typeof createBillingSaga>;
