import { createWorker } from '@skiplock/queue';
import { createSagaRuntime, defineSaga, migrate, type AnySagaDefinition } from '@skiplock/saga';
import { pino } from 'pino';
import type pg from 'pg';
import { z } from 'zod';
import { afterCommit } from '../query-counter.js';
import {
  cancelInvoice,
  charge,
  ChargeDeclinedError,
  createInvoice,
  prepare,
  sendReceipt,
  unprepare,
  type BillingInput,
  type BranchId,
} from './billing.js';
import type { SagaShapeId, SagaSystem } from './types.js';

const logger = pino({ level: 'warn' });
type Tx = <T>(work: (tx: pg.PoolClient) => Promise<T>) => Promise<T>;
const finishers = new Map<number, () => void>();

/** The saga's last transaction for saga `n` has committed: it is finished. */
function finishOnCommit(tx: object, n: number): void {
  afterCommit(tx, () => {
    finishers.get(n)?.();
    finishers.delete(n);
  });
}

const input = z.object({
  n: z.number().int(),
  amountCents: z.number().int(),
  decline: z.boolean(),
});

const createInvoiceStep = {
  run: (ctx: { transaction: Tx }, input: BillingInput) =>
    ctx.transaction((tx) => createInvoice(tx, input)),
  compensate: (ctx: { transaction: Tx; input: BillingInput }) =>
    ctx.transaction(async (tx) => {
      await cancelInvoice(tx, ctx.input);
      finishOnCommit(tx, ctx.input.n);
    }),
};
const receiptStep = {
  run: (ctx: { transaction: Tx }, input: BillingInput) =>
    ctx.transaction(async (tx) => {
      const out = await sendReceipt(tx, input);
      finishOnCommit(tx, input.n);
      return out;
    }),
};

const billing = defineSaga({ name: 'bench-billing', version: 1, input })
  .step('create-invoice', createInvoiceStep)
  .step('charge', {
    nonRetryable: [ChargeDeclinedError],
    run: (ctx, input) => ctx.transaction((tx) => charge(tx, input)),
  })
  .step('receipt', receiptStep);

/** A branch of the fan-out: its row, undone by deleting it; `d` may be declined. */
const prepared = (b: BranchId) => ({
  nonRetryable: [ChargeDeclinedError],
  run: (ctx: { transaction: Tx }, input: BillingInput) =>
    ctx.transaction((tx) => prepare(tx, input, b)),
  compensate: (ctx: { transaction: Tx; input: BillingInput }) =>
    ctx.transaction((tx) => unprepare(tx, ctx.input, b)),
});

const fanout = defineSaga({ name: 'bench-fanout', version: 1, input })
  .step('create-invoice', createInvoiceStep)
  .parallel('prepare', (branch) => ({
    a: branch(prepared('a')),
    b: branch(prepared('b')),
    c: branch(prepared('c')),
    d: branch(prepared('d')),
  }))
  .step('receipt', receiptStep);

const definitions: Record<SagaShapeId, AnySagaDefinition> = { billing, fanout };

/**
 * skiplock's saga with default settings: one job per step, each step's writes, its record and the
 * next step's job in one fenced transaction, the full history kept. The starter and a worker
 * (concurrency 10) share the process, as the DBOS run does, and the runtime hands its starts'
 * first steps to that worker (`attachWorker`).
 */
export const skiplockSaga: SagaSystem = {
  id: 'skiplock-saga',
  async install(url) {
    await migrate({ connectionString: url, logger });
  },
  async engine(url, shape) {
    const definition = definitions[shape];
    const runtime = createSagaRuntime({ connectionString: url, sagas: [definition], logger });
    const worker = createWorker({ connectionString: url, jobs: runtime.jobs, logger });
    await worker.start();
    // Starter and worker share the process: a start hands its first step to this worker.
    runtime.attachWorker(worker);
    return {
      async start(input) {
        const finished = new Promise<void>((resolve) => finishers.set(input.n, resolve));
        await runtime.start(definition, { id: `${shape}-${input.n}`, input });
        return { finished };
      },
      async close() {
        await worker.stop({ timeoutMs: 2_000 });
        await runtime.close();
      },
    };
  },
};
