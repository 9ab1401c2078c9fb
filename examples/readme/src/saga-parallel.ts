// Parallel branches: packages/saga/README.md's snippet, as a complete program. Stock, card and a
// fraud check run at once after a quote; the first checkout completes, the second's card is
// declined, so its stock reservation (completed meanwhile) and its quote are undone.
// Run: DATABASE_URL=postgres://... npx tsx saga-parallel.ts
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { z } from 'zod';
import { createWorker } from '@skiplock/queue';
import { createSagaRuntime, defineSaga, migrate } from '@skiplock/saga';

// Stand-ins for a pricing service, the stock service and the card processor.
const undone: string[] = [];
const quote = (sku: string) => ({ total: sku === 'B7' ? 250_000 : 1999 });
const reserveStock = async (sku: string) => ({ reservation: `rsv_${sku}` });
const authorise = async (cents: number) => {
  if (cents > 100_000) throw new Error('card declined');
  return { auth: `auth_${cents}` };
};

const checkout = defineSaga({
  name: 'checkout',
  version: 1,
  input: z.object({ sku: z.string() }),
})
  .step('quote', {
    run: (ctx) => quote(ctx.input.sku),
    compensate: (ctx) => void undone.push(`${ctx.sagaId}: quote`),
  })
  .parallel('prepare', (branch) => ({
    stock: branch({
      run: (ctx) => reserveStock(ctx.input.sku),
      compensate: (ctx, output) => void undone.push(`${ctx.sagaId}: ${output.reservation}`),
    }),
    card: branch({
      maxAttempts: 1,
      run: (ctx) => authorise(ctx.steps.quote.total), // typed: { total: number }
    }),
    fraud: branch({ run: () => ({ score: 3 }) }),
  }))
  .step('charge', {
    pivot: true,
    run: (ctx) => `charged ${ctx.steps.prepare.card.auth}`, // each branch's output, typed
  });

const pool = new pg.Pool({ connectionString: process.env['DATABASE_URL'] });
await migrate({ pool });
const sagas = createSagaRuntime({ pool, sagas: [checkout] });
const worker = createWorker({ pool, jobs: sagas.jobs, concurrency: 4 });
await worker.start();

const ids = ['checkout-1', 'checkout-2'];
await sagas.start(checkout, { id: ids[0]!, input: { sku: 'A1' } });
await sagas.start(checkout, { id: ids[1]!, input: { sku: 'B7' } });

// A real worker runs until SIGTERM; this program waits for both sagas to finish, then stops.
for (const id of ids) {
  let view = await sagas.getSaga(id);
  for (let i = 0; i < 300 && !['completed', 'compensated'].includes(view?.status ?? ''); i++) {
    await sleep(100);
    view = await sagas.getSaga(id);
  }
  const steps = view?.history.map((h) => `${h.kind === 'step' ? '' : 'undo '}${h.step}`);
  const branches = view?.children.map((c) => `${c.id.split('/').pop()} ${c.status}`);
  console.log(`saga ${id}: ${view?.status} (${steps?.join(' → ')}; ${branches?.join(', ')})`);
}
console.log(`undone: ${undone.sort().join(', ')}`);
await worker.stop();
await sagas.close();
await pool.end();
