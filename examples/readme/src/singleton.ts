// Singleton keys: packages/queue/README.md's snippet, as a complete program.
// Run: DATABASE_URL=postgres://... npx tsx singleton.ts
import { z } from 'zod';
import { createClient, defineJob, migrate } from '@skiplock/queue';

// Rebuild a customer's search index once, however many edits arrive before it runs.
const reindex = defineJob({
  type: 'reindex-customer',
  payload: z.object({ customerId: z.string(), editedAt: z.string() }),
  singletonKey: ({ customerId }) => `customer:${customerId}`,
  singletonMode: 'replace', // debounce: the queued job takes the latest payload and run time
  handler: async () => {},
});

const connectionString = process.env['DATABASE_URL'];
await migrate({ connectionString });
const client = createClient({ connectionString });
const results = [];
for (const editedAt of ['10:00', '10:01', '10:02']) {
  results.push(await client.enqueue(reindex, { customerId: 'c1', editedAt }, { delayMs: 5_000 }));
}
const job = await client.getJob(results[0]!.id);
await client.close();
const { editedAt } = job?.payload as { editedAt: string };
// Concurrent enqueues from many processes are safe too: one queued job per key, always.
console.log(
  `3 edits, ${new Set(results.map((r) => r.id)).size} queued job, with the latest edit: ${editedAt}`,
);
