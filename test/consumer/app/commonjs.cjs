// A CommonJS application: require() loads skiplock's ES module build (Node 20.19+, 22.12+).
'use strict';
const { z } = require('zod');
const { createClient, defineJob } = require('@skiplock/queue');
const { defineSaga, migrate } = require('@skiplock/saga');

const ping = defineJob({
  type: 'cjs-ping',
  payload: z.object({ n: z.number() }),
  handler: async () => {},
});
const saga = defineSaga({ name: 'cjs', version: 1, input: z.object({}) }).step('only', {
  run: async () => ({ ok: true }),
});

async function main() {
  const connectionString = process.env.DATABASE_URL;
  await migrate({ connectionString });
  const client = createClient({ connectionString });
  try {
    const { id, inserted } = await client.enqueue(ping, { n: 1 });
    const job = await client.getJob(id);
    console.log(`commonjs: job ${id} inserted=${inserted} status=${job.status} saga=${saga.name}`);
  } finally {
    await client.close();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
