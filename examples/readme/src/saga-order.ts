// An order saga: packages/saga/README.md's snippet, as a complete program. Steps with typed
// outputs, compensations, a step that writes in the step's own transaction, a wait for a signal,
// a pivot and a retriable step after it.
// Run: DATABASE_URL=postgres://... npx tsx saga-order.ts
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { z } from 'zod';
import { createWorker } from '@skiplock/queue';
import { createSagaRuntime, defineSaga, migrate } from '@skiplock/saga';

// Stand in for your stock service, card processor and carrier.
class CardDeclinedError extends Error {}
const reservations = new Map<string, string>(); // idempotency key → reservation id
const stock = {
  async reserve(sku: string, idempotencyKey: string) {
    // The same key gets the same reservation, so a retried attempt holds only one.
    const id = reservations.get(idempotencyKey) ?? `rsv_${sku}_${reservations.size + 1}`;
    reservations.set(idempotencyKey, id);
    return id;
  },
  async release(reservationId: string) {
    for (const [key, id] of reservations) if (id === reservationId) reservations.delete(key);
  },
};
const charges = new Map<string, string>(); // idempotency key → charge id
const payments = {
  async charge(cents: number, { idempotencyKey }: { idempotencyKey: string }) {
    if (cents > 100_000) throw new CardDeclinedError('card declined');
    const chargeId = charges.get(idempotencyKey) ?? `ch_${charges.size + 1}`;
    charges.set(idempotencyKey, chargeId);
    return { chargeId };
  },
};
const shipping = {
  async book(chargeId: string) {
    return { trackingId: `trk_${chargeId}` };
  },
};

const order = defineSaga({
  name: 'order',
  version: 1,
  input: z.object({ orderId: z.string(), sku: z.string(), cents: z.number().int() }),
  deadlineMs: 10 * 60_000,
})
  .step('reserve', {
    run: async (ctx, input) => ({
      reservationId: await stock.reserve(input.sku, ctx.idempotencyKey),
    }),
    // Gets the step's own recorded output; runs as its own job with its own retries.
    compensate: async (_ctx, output) => stock.release(output.reservationId),
  })
  .step('record', {
    // Writes to the same database commit together with the step's completion: exactly once.
    run: (ctx, input) =>
      ctx.transaction(async (tx) => {
        await tx.query('INSERT INTO shop.orders (id, reservation) VALUES ($1, $2)', [
          input.orderId,
          ctx.steps.reserve.reservationId, // typed: { reservationId: string }
        ]);
        return { recorded: true };
      }),
    compensate: (ctx) =>
      ctx.transaction((tx) =>
        tx.query('DELETE FROM shop.orders WHERE id = $1', [ctx.input.orderId]),
      ),
  })
  .waitFor('approved', { payload: z.object({ by: z.string() }), timeoutMs: 60_000 })
  .step('charge', {
    pivot: true, // after it succeeds, the saga no longer compensates
    maxAttempts: 5,
    nonRetryable: [CardDeclinedError],
    run: async (ctx, input) => payments.charge(input.cents, { idempotencyKey: ctx.idempotencyKey }),
  })
  .step('ship', { retriable: true, run: async (ctx) => shipping.book(ctx.steps.charge.chargeId) });

const pool = new pg.Pool({ connectionString: process.env['DATABASE_URL'] });
await migrate({ pool }); // the queue's tables and the saga's
await pool.query(`CREATE SCHEMA IF NOT EXISTS shop;
  CREATE TABLE IF NOT EXISTS shop.orders (id text PRIMARY KEY, reservation text NOT NULL)`);
const sagas = createSagaRuntime({ pool, sagas: [order] });
const worker = createWorker({ pool, jobs: sagas.jobs });
await worker.start();

await sagas.start(order, { id: 'order-42', input: { orderId: '42', sku: 'A1', cents: 1999 } });
await sagas.start(order, { id: 'order-43', input: { orderId: '43', sku: 'B7', cents: 250_000 } });

/** Polls until the saga reaches one of `statuses` (a real application reads it when asked). */
async function waitUntil(id: string, statuses: string[]) {
  let view = await sagas.getSaga(id);
  for (let i = 0; i < 300 && !statuses.includes(view?.status ?? ''); i++) {
    await sleep(100);
    view = await sagas.getSaga(id);
  }
  return view;
}

for (const id of ['order-42', 'order-43']) {
  const waiting = await waitUntil(id, ['waiting']);
  console.log(`saga ${id}: ${waiting?.status} at ${waiting?.currentStep}`);
  await sagas.signal(id, 'approved', { by: 'ann' }); // from a webhook, say
}

// A real worker runs until SIGTERM; this program waits for both sagas to finish, then stops.
for (const id of ['order-42', 'order-43']) {
  const view = await waitUntil(id, ['completed', 'compensated', 'cancelled', 'failed']);
  const steps = view?.history.map((h) => `${h.kind === 'step' ? '' : 'undo '}${h.step}`);
  console.log(`saga ${id}: ${view?.status} (${steps?.join(' → ')})`);
}
const { rows } = await pool.query<{ id: string }>('SELECT id FROM shop.orders ORDER BY id');
console.log(
  `orders recorded: ${rows.map((r) => r.id).join(', ')}; reservations held: ${reservations.size}`,
);
await worker.stop();
await sagas.close();
await pool.end();
