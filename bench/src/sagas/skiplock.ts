import { createWorker } from '@skiplock/queue';
import { createSagaRuntime, defineSaga, migrate } from '@skiplock/saga';
import { pino } from 'pino';
import { z } from 'zod';
import { afterCommit } from '../query-counter.js';
import {
  cancelInvoice,
  charge,
  ChargeDeclinedError,
  createInvoice,
  sendReceipt,
} from './billing.js';
import type { SagaSystem } from './types.js';

const logger = pino({ level: 'warn' });
const finishers = new Map<number, () => void>();

/** The saga's last transaction for saga `n` has committed: it is finished. */
function finishOnCommit(tx: object, n: number): void {
  afterCommit(tx, () => {
    finishers.get(n)?.();
    finishers.delete(n);
  });
}

const billing = defineSaga({
  name: 'bench-billing',
  version: 1,
  input: z.object({ n: z.number().int(), amountCents: z.number().int(), decline: z.boolean() }),
})
  .step('create-invoice', {
    run: (ctx, input) => ctx.transaction((tx) => createInvoice(tx, input)),
    compensate: (ctx) =>
      ctx.transaction(async (tx) => {
        await cancelInvoice(tx, ctx.input);
        finishOnCommit(tx, ctx.input.n);
      }),
  })
  .step('charge', {
    nonRetryable: [ChargeDeclinedError],
    run: (ctx, input) => ctx.transaction((tx) => charge(tx, input)),
  })
  .step('receipt', {
    run: (ctx, input) =>
      ctx.transaction(async (tx) => {
        const out = await sendReceipt(tx, input);
        finishOnCommit(tx, input.n);
        return out;
      }),
  });

/**
 * skiplock's saga with default settings: one job per step, each step's writes, its record and the
 * next step's job in one fenced transaction, the full history kept. The starter and a worker
 * (concurrency 10) share the process, as the DBOS run does.
 */
export const skiplockSaga: SagaSystem = {
  id: 'skiplock-saga',
  async install(url) {
    await migrate({ connectionString: url, logger });
  },
  async engine(url) {
    const runtime = createSagaRuntime({ connectionString: url, sagas: [billing], logger });
    const worker = createWorker({ connectionString: url, jobs: runtime.jobs, logger });
    await worker.start();
    return {
      async start(input) {
        const finished = new Promise<void>((resolve) => finishers.set(input.n, resolve));
        await runtime.start(billing, { id: `billing-${input.n}`, input });
        return { finished };
      },
      async close() {
        await worker.stop({ timeoutMs: 2_000 });
        await runtime.close();
      },
    };
  },
};
