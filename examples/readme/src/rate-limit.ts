// Rate limits: packages/queue/README.md's snippet, as a complete program.
// Run: DATABASE_URL=postgres://... npx tsx rate-limit.ts
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { createClient, createWorker, defineJob, migrate } from '@skiplock/queue';

const starts: number[] = [];
const callPartner = defineJob({
  type: 'call-partner',
  payload: z.object({ tenant: z.string(), n: z.number() }),
  // At most 5 starts per 500 ms for each tenant, across every worker on every host.
  rateLimit: { limit: 5, intervalMs: 500, key: ({ tenant }) => `tenant:${tenant}` },
  handler: async () => void starts.push(Date.now()),
});

const connectionString = process.env['DATABASE_URL'];
await migrate({ connectionString });
const client = createClient({ connectionString });
await client.enqueueMany(
  callPartner,
  Array.from({ length: 12 }, (_, n) => ({ payload: { tenant: 'acme', n } })),
);
const worker = createWorker({ connectionString, jobs: [callPartner], concurrency: 10 });
await worker.start();
for (let i = 0; i < 100 && starts.length < 12; i++) await sleep(100);
await worker.stop();
await client.close();

// 12 starts at 5 per 500 ms take three windows: the last starts about a second after the first.
const spanMs = Math.max(...starts) - Math.min(...starts);
console.log(
  `${starts.length} jobs ran, the last ${spanMs >= 900 ? 'about 1 s or more' : `only ${spanMs} ms`} after the first`,
);
