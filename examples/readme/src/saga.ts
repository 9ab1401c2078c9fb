// A saga with a compensation: the top README's saga snippet, as a complete program.
// Run: DATABASE_URL=postgres://... npx tsx saga.ts
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { z } from 'zod';
import { createWorker, NonRetryableError } from '@skiplock/queue';
import { createSagaRuntime, defineSaga, migrate } from '@skiplock/saga';

// Stand in for your credit ledger and card processor.
const reserved = new Map<string, number>();
const credit = {
  async reserve(invoiceId: string, cents: number, idempotencyKey: string) {
    reserved.set(idempotencyKey, cents);
    return `res_${invoiceId}`;
  },
  async release(idempotencyKey: string) {
    reserved.delete(idempotencyKey);
  },
};
const psp = {
  async charge(invoiceId: string, cents: number) {
    if (cents > 100_000) throw new NonRetryableError('card declined'); // fails for good at once
    return { chargeId: `ch_${invoiceId}` };
  },
};

const billing = defineSaga({
  name: 'bill',
  version: 1,
  input: z.object({ invoiceId: z.string(), cents: z.number().int().positive() }),
})
  .step('reserve', {
    run: async (ctx, input) => ({
      reservationId: await credit.reserve(input.invoiceId, input.cents, ctx.idempotencyKey),
      key: ctx.idempotencyKey,
    }),
    // Gets the step's own recorded output, typed; runs as its own job with its own retries.
    compensate: async (_ctx, output) => credit.release(output.key),
  })
  .step('charge', {
    run: async (ctx, input) => psp.charge(input.invoiceId, input.cents),
  });

const pool = new pg.Pool({ connectionString: process.env['DATABASE_URL'] });
await migrate({ pool });
const sagas = createSagaRuntime({ pool, sagas: [billing] });
const worker = createWorker({ pool, jobs: sagas.jobs });
await worker.start();

// In your own transaction: your writes in it and the saga's start commit or roll back together.
const db = await pool.connect();
try {
  await db.query('BEGIN');
  await sagas.start(billing, { id: 'inv_1', input: { invoiceId: 'inv_1', cents: 1_200 }, tx: db });
  await db.query('COMMIT');
} catch (error) {
  await db.query('ROLLBACK');
  throw error;
} finally {
  db.release();
}
await sagas.start(billing, { id: 'inv_2', input: { invoiceId: 'inv_2', cents: 250_000 } });

// A real worker runs until SIGTERM; this program waits for both sagas to finish, then stops.
const finished = ['completed', 'compensated', 'failed'];
const views = [];
for (const id of ['inv_1', 'inv_2']) {
  let view = await sagas.getSaga(id);
  for (let i = 0; i < 300 && !finished.includes(view?.status ?? ''); i++) {
    await sleep(100);
    view = await sagas.getSaga(id);
  }
  views.push(view);
}
await worker.stop();
await sagas.close();
await pool.end();
for (const view of views) {
  const steps = view?.history.map((h) => `${h.kind === 'step' ? '' : 'undo '}${h.step}`);
  console.log(`saga ${view?.id}: ${view?.status} (${steps?.join(' → ')})`);
}
console.log(`reservations still held: ${reserved.size}`);
const ok = views[0]?.status === 'completed' && views[1]?.status === 'compensated';
if (!ok || reserved.size !== 1) process.exit(1);
