import { beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob, SkiplockError } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { jobRow, quiet, sideNotes, testWorker } from './fixtures.js';

// completeWith called inside its own work waited for the job's row, which the open transaction
// holds: the attempt hung until its timeout. Called after it committed, it failed with a
// LockLostError for a job that had completed (found in an audit).

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });
const side = await sideNotes(db.pool);
const notes = side.notes;

describe('completeWith called where it cannot run', () => {
  beforeEach(async () => {
    await side.clear();
  });

  it('refuses a call inside the work of an open one at once, and nothing of either commits', async () => {
    let inner: unknown;
    const def = defineJob({
      type: 'cw-nested',
      queue: 'cw-nested',
      payload: z.object({}),
      maxAttempts: 1,
      // Before: the inner call waited for the row until this timeout ended the attempt.
      timeoutMs: 10_000,
      handler: async (_payload, ctx) => {
        await ctx.completeWith(async (tx) => {
          await tx.query(`INSERT INTO side VALUES ('outer')`);
          try {
            await ctx.completeWith(async (tx2) => tx2.query(`INSERT INTO side VALUES ('inner')`));
          } catch (error) {
            inner = error;
            throw error;
          }
        });
      },
    });
    const { id } = await client.enqueue(def, {});
    expect(await testWorker(db.pool, [def]).runOnce()).toBe(1);
    expect(inner).toBeInstanceOf(SkiplockError);
    expect(inner).toMatchObject({ code: 'complete_with_open' });
    const row = await jobRow(db.pool, id);
    expect(row.status).toBe('dead');
    expect(row.last_error).toMatch(/another completeWith of job \d+ is open/);
    expect(await notes()).toEqual([]);
  });

  it('refuses a second call after one committed, without touching the completed job', async () => {
    let second: unknown;
    const def = defineJob({
      type: 'cw-twice',
      queue: 'cw-twice',
      payload: z.object({}),
      handler: async (_payload, ctx) => {
        await ctx.completeWith(async (tx) => tx.query(`INSERT INTO side VALUES ('first')`));
        second = await ctx
          .completeWith(async (tx) => tx.query(`INSERT INTO side VALUES ('second')`))
          .catch((error: unknown) => error);
      },
    });
    const { id } = await client.enqueue(def, {});
    const worker = testWorker(db.pool, [def]);
    const lost: string[] = [];
    worker.on('job:lock_lost', (e) => lost.push(e.jobId));
    expect(await worker.runOnce()).toBe(1);
    expect(second).toBeInstanceOf(SkiplockError);
    expect(second).toMatchObject({ code: 'already_completed' });
    expect((second as Error).message).toMatch(/completed by an earlier one/);
    expect(lost).toEqual([]);
    expect((await jobRow(db.pool, id)).status).toBe('completed');
    expect(await notes()).toEqual(['first']);
  });

  it('lets a handler call it again after one rolled back', async () => {
    let first: unknown;
    const def = defineJob({
      type: 'cw-again',
      queue: 'cw-again',
      payload: z.object({}),
      handler: async (_payload, ctx) => {
        first = await ctx
          .completeWith(async (tx) => {
            await tx.query(`INSERT INTO side VALUES ('rolled back')`);
            throw new Error('changed my mind');
          })
          .catch((error: unknown) => error);
        await ctx.completeWith(async (tx) => tx.query(`INSERT INTO side VALUES ('again')`));
      },
    });
    const { id } = await client.enqueue(def, {});
    expect(await testWorker(db.pool, [def]).runOnce()).toBe(1);
    expect((first as Error).message).toBe('changed my mind');
    expect((await jobRow(db.pool, id)).status).toBe('completed');
    expect(await notes()).toEqual(['again']);
  });
});
