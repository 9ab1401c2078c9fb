import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, createWorker, defineJob } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';

const db = await useTestDatabase();
const logger = pino({ level: 'silent' });

describe('enqueue and work', () => {
  it('runs an enqueued job to completed', async () => {
    const seen: number[] = [];
    const add = defineJob({
      type: 'add',
      payload: z.object({ n: z.number() }),
      handler: async ({ n }) => {
        seen.push(n);
      },
    });
    const client = createClient({ pool: db.pool, logger });
    const { id, inserted } = await client.enqueue(add, { n: 7 });
    expect(inserted).toBe(true);
    const worker = createWorker({
      pool: db.pool,
      jobs: [add],
      logger,
      sweeper: false,
      retention: false,
    });
    expect(await worker.runOnce()).toBe(1);
    expect(seen).toEqual([7]);
    const job = await client.getJob(id);
    expect(job?.status).toBe('completed');
    expect(job?.attempts).toBe(1);
  });
});
