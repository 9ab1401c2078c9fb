import { createClient, type AnyJobDefinition, type Client, type Logger } from '@skiplock/queue';
import {
  createSagaRuntime,
  type FaultHook,
  type RetryPolicy,
  type SagaRuntime,
} from '@skiplock/saga';
import type pg from 'pg';
import type { Faults } from './faults.js';
import { insertDraftInvoice } from './invoices.js';
import { createFakeProvider, type FakeProvider, type ProviderRates } from './provider.js';
import { createBillingSaga, PAYMENT_CONFIRMED, type BillingSaga } from './saga.js';
import { defineWebhookJob } from './webhook.js';

export interface BillingSystemOptions {
  pool: pg.Pool;
  logger: Logger;
  rates: ProviderRates;
  /** Upper bound of the simulated provider round trip (default 0). */
  providerLatencyMs?: number;
  /** The provider's webhook for a pending charge arrives within this (default 500 ms). */
  webhookDelayMs?: number;
  confirmTimeoutMs?: number;
  faults?: Faults;
  retry?: Pick<RetryPolicy, 'backoff' | 'leaseMs'>;
  random?: () => number;
  /** The saga runtime's crash injection (tests only): fail an attempt before or after its code. */
  sagaFaults?: FaultHook;
}

export interface BillingSystem {
  saga: BillingSaga;
  runtime: SagaRuntime;
  provider: FakeProvider;
  client: Client;
  /** Every job type a billing worker must know: the saga's steps and the webhook. */
  jobs: AnyJobDefinition[];
  /** Creates a draft invoice and starts its saga in one transaction; returns the invoice id. */
  openInvoice(invoice: { customerId: string; amountCents: number; id?: string }): Promise<string>;
}

/** Wires the provider, the saga, its runtime and the webhook job for one process. */
export function createBillingSystem(options: BillingSystemOptions): BillingSystem {
  const { pool, logger } = options;
  const random = options.random ?? Math.random;
  const webhookDelayMs = options.webhookDelayMs ?? 500;
  const client = createClient({ pool, logger });
  // The webhook job and the provider refer to each other; the job is defined just below.
  let webhookJob: ReturnType<typeof defineWebhookJob> | null = null;
  const provider = createFakeProvider({
    pool,
    rates: options.rates,
    random,
    latencyMs: options.providerLatencyMs ?? 0,
    onPending: async (tx, key, request) => {
      await client.enqueue(
        webhookJob!,
        { providerKey: key, sagaId: request.invoiceId },
        { tx, delayMs: Math.floor(random() * webhookDelayMs), idempotencyKey: `webhook:${key}` },
      );
    },
  });
  let runtime: SagaRuntime | null = null;
  const saga = createBillingSaga({
    provider,
    faults: options.faults,
    confirmTimeoutMs: options.confirmTimeoutMs ?? 30_000,
    retry: options.retry,
    confirm: async (tx, sagaId, payload) => {
      await runtime!.signal(sagaId, PAYMENT_CONFIRMED, payload, { tx });
    },
  });
  runtime = createSagaRuntime({ pool, sagas: [saga], logger, faults: options.sagaFaults });
  const sagaRuntime = runtime;
  webhookJob = defineWebhookJob({
    provider,
    deliver: async (sagaId, payload) => {
      await sagaRuntime.signal(sagaId, PAYMENT_CONFIRMED, payload);
    },
  });

  return {
    saga,
    runtime,
    provider,
    client,
    jobs: [...runtime.jobs, webhookJob],
    async openInvoice(invoice) {
      const tx = await pool.connect();
      try {
        await tx.query('BEGIN');
        const input = await insertDraftInvoice(tx, invoice);
        // The saga's id is the invoice's: starting twice for one invoice is one saga.
        await sagaRuntime.start(saga, { id: input.invoiceId, input, tx });
        await tx.query('COMMIT');
        return input.invoiceId;
      } catch (error) {
        await tx.query('ROLLBACK').catch(() => {});
        throw error;
      } finally {
        tx.release();
      }
    },
  };
}
