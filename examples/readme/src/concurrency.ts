// Concurrency keys: packages/queue/README.md's snippet, as a complete program.
// Run: DATABASE_URL=postgres://... npx tsx concurrency.ts
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { createClient, createWorker, defineJob, migrate } from '@skiplock/queue';

// Stands in for a partner API that allows each tenant two calls at a time.
const inFlight = new Map<string, number>();
const most = new Map<string, number>();
const partnerApi = {
  async sync(tenant: string) {
    const now = (inFlight.get(tenant) ?? 0) + 1;
    inFlight.set(tenant, now);
    most.set(tenant, Math.max(most.get(tenant) ?? 0, now));
    await sleep(20);
    inFlight.set(tenant, inFlight.get(tenant)! - 1);
  },
};

const syncTenant = defineJob({
  type: 'sync-tenant',
  payload: z.object({ tenant: z.string(), page: z.number() }),
  // At most 2 jobs of one tenant run at a time, across every worker on every host.
  concurrencyKey: ({ tenant }) => `tenant:${tenant}`,
  concurrencyLimit: 2,
  handler: async ({ tenant }) => partnerApi.sync(tenant),
});

const connectionString = process.env['DATABASE_URL'];
await migrate({ connectionString });
const client = createClient({ connectionString });
await client.enqueueMany(syncTenant, [
  ...Array.from({ length: 12 }, (_, page) => ({ payload: { tenant: 'acme', page } })),
  { payload: { tenant: 'globex', page: 0 } },
]);

// Ten slots in this worker, but acme's twelve jobs go through two at a time, and globex's job
// does not wait behind them.
const worker = createWorker({ connectionString, jobs: [syncTenant], concurrency: 10 });
await worker.start();
for (let i = 0; i < 300 && (await client.stats()).some((s) => s.status !== 'completed'); i++) {
  await sleep(100);
}
await worker.stop();
await client.close();
console.log(`acme: at most ${most.get('acme')} at once; globex: ${most.get('globex')}`);
