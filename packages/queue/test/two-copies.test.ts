import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob, NonRetryableError } from '../src/index.js';
import { bundleForNode } from '../../../test/support/bundle.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { fastBackoff, jobRow, quiet, testWorker } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });
const other = (await import(
  pathToFileURL(await bundleForNode(new URL('./other-copy/queue.ts', import.meta.url))).href
)) as { NonRetryableError: typeof NonRetryableError };

describe('a NonRetryableError from another copy of @skiplock/queue', () => {
  it('sends the job dead at once, as the README says, not retried', async () => {
    expect(other.NonRetryableError).not.toBe(NonRetryableError);
    let runs = 0;
    const charge = defineJob({
      type: 'charge-card',
      queue: 'two-copies',
      payload: z.object({ invoiceId: z.string() }),
      maxAttempts: 5,
      backoff: fastBackoff,
      handler: () => {
        runs += 1;
        throw new other.NonRetryableError('card declined');
      },
    });
    const { id } = await client.enqueue(charge, { invoiceId: 'inv_1' });
    const worker = testWorker(db.pool, [charge]);
    expect(await worker.runOnce()).toBe(1);
    // Before: instanceof failed across copies: retried with reason error, runs 5, max_attempts.
    const row = await jobRow(db.pool, id);
    expect({ runs, status: row.status, reasons: row.errors.map((e) => e.reason) }).toEqual({
      runs: 1,
      status: 'dead',
      reasons: ['non_retryable'],
    });
  });
});
