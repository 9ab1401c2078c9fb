// Enqueue inside your own transaction: packages/queue/README.md's snippet, as a complete program.
// Run: DATABASE_URL=postgres://... npx tsx queue-in-transaction.ts
import { setTimeout as sleep } from 'node:timers/promises';
import { eq, sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { integer, pgSchema, text } from 'drizzle-orm/pg-core';
import pg from 'pg';
import { z } from 'zod';
import { createClient, createWorker, defineJob, migrate, NonRetryableError } from '@skiplock/queue';

// Your application's own table, in a schema of its own.
const invoicing = pgSchema('invoicing');
const invoices = invoicing.table('invoices', {
  id: text('id').primaryKey(),
  amountCents: integer('amount_cents').notNull(),
  chargeId: text('charge_id'),
});

// Stands in for your card processor: declines amounts over 1,000.00.
const psp = {
  async charge(charge: {
    invoiceId: string;
    amountCents: number;
    idempotencyKey: string;
    signal: AbortSignal;
  }) {
    charge.signal.throwIfAborted();
    if (charge.amountCents > 100_000) return { declined: true, chargeId: null };
    return { declined: false, chargeId: `ch_${charge.invoiceId}` };
  },
};

const chargeCard = defineJob({
  type: 'charge-card', // stable name stored with each job
  queue: 'billing',
  payload: z.object({ invoiceId: z.string(), amountCents: z.number().int().positive() }),
  maxAttempts: 8,
  backoff: { baseMs: 1_000, maxMs: 300_000 },
  timeoutMs: 15_000, // the handler's signal fires; the attempt fails with reason `timeout`
  leaseMs: 30_000, // visibility timeout, renewed by heartbeats while the handler runs
  handler: async ({ invoiceId, amountCents }, ctx) => {
    const result = await psp.charge({
      invoiceId,
      amountCents,
      idempotencyKey: ctx.idempotencyKey,
      signal: ctx.signal,
    });
    if (result.declined) throw new NonRetryableError('card declined'); // dead at once, never retried
    // The invoice's update and the job's completion commit together: exactly once.
    await ctx.completeWith((tx) =>
      tx.query('UPDATE invoicing.invoices SET charge_id = $1 WHERE id = $2', [
        result.chargeId,
        invoiceId,
      ]),
    );
  },
});

const pool = new pg.Pool({ connectionString: process.env['DATABASE_URL'] });
const db = drizzle(pool);
await migrate({ pool });
await db.execute(sql`CREATE SCHEMA IF NOT EXISTS invoicing`);
await db.execute(sql`CREATE TABLE IF NOT EXISTS invoicing.invoices (
  id text PRIMARY KEY, amount_cents integer NOT NULL, charge_id text)`);
const client = createClient({ pool });

// Inside your own transaction: the invoice and its job commit or roll back together.
async function createInvoice(id: string, amountCents: number, fail = false) {
  let jobId = null as string | null;
  try {
    await db.transaction(async (tx) => {
      await tx.insert(invoices).values({ id, amountCents });
      const job = await client.enqueue(
        chargeCard,
        { invoiceId: id, amountCents },
        { tx, idempotencyKey: `charge:${id}` },
      );
      jobId = job.id;
      if (fail) throw new Error('something after the enqueue failed');
    });
  } catch (error) {
    console.log(`invoice ${id}: rolled back (${(error as Error).message})`);
  }
  return jobId;
}
const jobIds = [
  await createInvoice('inv_1', 1_200),
  await createInvoice('inv_2', 250_000),
  await createInvoice('inv_3', 900, true),
];

const worker = createWorker({ pool, jobs: [chargeCard], concurrency: 10 });
await worker.start();
process.once('SIGTERM', () => void worker.stop({ timeoutMs: 30_000 }));

// A real worker runs until SIGTERM; this program waits for its jobs to settle, then stops.
const settled = ['completed', 'dead'];
for (const [i, jobId] of jobIds.entries()) {
  let job = jobId === null ? null : await client.getJob(jobId);
  for (let n = 0; n < 300 && job && !settled.includes(job.status); n++) {
    await sleep(100);
    job = await client.getJob(job.id);
  }
  const [invoice] = await db
    .select()
    .from(invoices)
    .where(eq(invoices.id, `inv_${i + 1}`));
  const charged = invoice?.chargeId ? `charged (${invoice.chargeId})` : 'not charged';
  const outcome = job ? `job ${job.status}${job.lastError ? ` (${job.lastError})` : ''}` : 'no job';
  console.log(`inv_${i + 1}: ${invoice ? `invoice ${charged}` : 'no invoice'}, ${outcome}`);
}
await worker.stop();
await client.close();
await pool.end();
