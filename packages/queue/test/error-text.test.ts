import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob } from '../src/index.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { fastBackoff, jobRow, testWorker } from './fixtures.js';

const db = await useTestDatabase();

describe("a handler's error as stored", () => {
  it('keeps a message with a NUL in it, the NUL replaced, and settles the attempt at once', async () => {
    const logs = captureLogs();
    const client = createClient({ pool: db.pool, logger: logs.logger });
    const def = defineJob({
      type: 'nul-error',
      queue: 'nul-error',
      payload: z.object({}),
      maxAttempts: 2,
      backoff: fastBackoff,
      handler: () => {
        throw new Error('upstream said: card\u0000declined');
      },
    });
    const { id } = await client.enqueue(def, {});
    const worker = testWorker(db.pool, [def], { logger: logs.logger, settleAttempts: 2 });
    expect(await worker.runOnce()).toBe(1);
    // Before: both writes of the failure failed (invalid byte sequence for encoding "UTF8":
    // 0x00), logged as db_error, and the job stayed processing until its lease ran out.
    const row = await jobRow(db.pool, id);
    expect(row).toMatchObject({ status: 'retryable', attempts: 1 });
    expect(row.last_error).toBe('upstream said: card\ufffddeclined');
    expect(logs.reasons()).not.toContain('db_error');
  });
});
