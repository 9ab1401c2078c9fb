// Define a job, enqueue it, work it: the top README's first snippet, as a complete program.
// Run: DATABASE_URL=postgres://... npx tsx queue.ts
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { createClient, createWorker, defineJob, migrate } from '@skiplock/queue';

// Stands in for your mail provider's client.
const sent: string[] = [];
const mailer = {
  async send(mail: { to: string; invoiceId: string; idempotencyKey: string; signal: AbortSignal }) {
    mail.signal.throwIfAborted();
    sent.push(`${mail.invoiceId} to ${mail.to} (key ${mail.idempotencyKey})`);
  },
};

const sendReceipt = defineJob({
  type: 'send-receipt',
  payload: z.object({ invoiceId: z.string(), email: z.email() }),
  maxAttempts: 5,
  timeoutMs: 10_000,
  handler: async ({ invoiceId, email }, ctx) => {
    await mailer.send({
      to: email,
      invoiceId,
      idempotencyKey: ctx.idempotencyKey,
      signal: ctx.signal,
    });
  },
});

const connectionString = process.env['DATABASE_URL'];
await migrate({ connectionString });
const client = createClient({ connectionString });
const { id } = await client.enqueue(sendReceipt, { invoiceId: 'inv_1', email: 'ada@example.com' });

const worker = createWorker({ connectionString, jobs: [sendReceipt] });
await worker.start();

// A real worker runs until SIGTERM; this program waits for its one job, then stops.
let job = await client.getJob(id);
for (let i = 0; i < 300 && job?.status !== 'completed'; i++) {
  await sleep(100);
  job = await client.getJob(id);
}
await worker.stop();
await client.close();
console.log(`job ${id}: ${job?.status}; sent ${sent.join(', ')}`);
if (job?.status !== 'completed') process.exit(1);
