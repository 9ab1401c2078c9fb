import { enqueueHandedOff } from '@skiplock/queue/engine';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob, SkiplockError } from '../src/index.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { jobRow, quiet, sideNotes, testWorker } from './fixtures.js';

// A statement of the caller's fails inside a transaction of skiplock's and the caller catches the
// error: PostgreSQL answers the COMMIT with ROLLBACK, not an error. Each of these was reported as
// committed with nothing of it in the database (found in an audit).

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });
const side = await sideNotes(db.pool);
const notes = side.notes;

describe('a transaction rolled back at COMMIT', () => {
  it('fails completeWith, and the attempt, instead of reporting the completion', async () => {
    let afterCommit = 0;
    let rejected: unknown;
    const def = defineJob({
      type: 'rb-complete',
      queue: 'rb-complete',
      payload: z.object({}),
      maxAttempts: 1,
      handler: async (_payload, ctx) => {
        try {
          await ctx.completeWith(async (tx) => {
            await tx.query(`INSERT INTO side VALUES ('complete')`);
            await tx.query('SELECT 1/0').catch(() => {});
          });
        } catch (error) {
          rejected = error;
          throw error;
        }
        afterCommit += 1;
      },
    });
    const { id } = await client.enqueue(def, {});
    const worker = testWorker(db.pool, [def]);
    const completed: string[] = [];
    worker.on('job:completed', (e) => completed.push(e.jobId));
    expect(await worker.runOnce()).toBe(1);
    expect(rejected).toBeInstanceOf(SkiplockError);
    expect(rejected).toMatchObject({ code: 'rolled_back' });
    // Before: afterCommit 1, one job:completed, and the row still processing with no side row.
    expect({ afterCommit, completed, notes: await notes() }).toEqual({
      afterCommit: 0,
      completed: [],
      notes: [],
    });
    const row = await jobRow(db.pool, id);
    expect(row.status).toBe('dead');
    expect(row.last_error).toMatch(/rolled back, not committed/);
  });

  it('runs no successor handed off in it: its insert was rolled back too', async () => {
    const ran: number[] = [];
    const def = defineJob({
      type: 'rb-handoff',
      queue: 'rb-handoff',
      payload: z.object({ n: z.number() }),
      maxAttempts: 1,
      handler: async ({ n }, ctx) => {
        ran.push(n);
        if (n > 0) return;
        await ctx.completeWith(async (tx) => {
          await enqueueHandedOff(client, tx, ctx, def, { n: 1 });
          await tx.query('SELECT 1/0').catch(() => {});
        });
      },
    });
    const { id } = await client.enqueue(def, { n: 0 });
    const worker = testWorker(db.pool, [def], { pollIntervalMs: 60_000, concurrency: 2 });
    await worker.start();
    try {
      await waitFor(async () => (await jobRow(db.pool, id)).status === 'dead');
      // Time for a phantom successor to start, had it been adopted (it started at once before).
      await new Promise((resolve) => setTimeout(resolve, 300));
    } finally {
      await worker.stop();
    }
    const { rows } = await db.pool.query(`SELECT id FROM skiplock.jobs WHERE queue = 'rb-handoff'`);
    expect(rows).toHaveLength(1);
    expect(ran).toEqual([0]);
  });

  it('treats an onDead hook whose transaction rolled back as one that threw', async () => {
    let hooks = 0;
    const def = defineJob({
      type: 'rb-dead',
      queue: 'rb-dead',
      payload: z.object({}),
      maxAttempts: 1,
      handler: () => {
        throw new Error('boom');
      },
      onDead: async (tx) => {
        hooks += 1;
        await tx.query(`INSERT INTO side VALUES ('dead hook')`);
        await tx.query('SELECT 1/0').catch(() => {});
      },
    });
    const { id } = await client.enqueue(def, {});
    const worker = testWorker(db.pool, [def], { settleAttempts: 2 });
    const dead: string[] = [];
    worker.on('job:dead', (e) => dead.push(e.jobId));
    await worker.runOnce();
    // Before: job:dead emitted with the row still processing and the hook's write gone.
    expect(dead).toEqual([]);
    expect(hooks).toBe(2);
    expect(await notes()).toEqual([]);
    const row = await jobRow(db.pool, id);
    expect(row.status).toBe('processing');
  });

  it("runs completeWith's work once when its own statement fails with a lost prepared statement's code", async () => {
    let calls = 0;
    const def = defineJob({
      type: 'rb-own-26000',
      queue: 'rb-own-26000',
      payload: z.object({}),
      maxAttempts: 1,
      handler: async (_payload, ctx) => {
        await ctx.completeWith(async (tx) => {
          calls += 1; // stands for an effect outside the database
          await tx.query(`INSERT INTO side VALUES ('own 26000')`);
          await tx.query('EXECUTE never_prepared'); // the caller's own statement: 26000
        });
      },
    });
    const { id } = await client.enqueue(def, {});
    expect(await testWorker(db.pool, [def]).runOnce()).toBe(1);
    // Before: 3 runs, as if a pooler had lost a statement of skiplock's.
    expect(calls).toBe(1);
    expect(await notes()).toEqual([]);
    const row = await jobRow(db.pool, id);
    expect(row.status).toBe('dead');
    expect(row.last_error).toMatch(/never_prepared/);
  });

  it("runs completeWith again when a pooler lost a prepared statement of skiplock's own", async () => {
    const one = db.newPool(1);
    const logs = captureLogs();
    let calls = 0;
    const def = defineJob({
      type: 'rb-lost-fence',
      queue: 'rb-lost-fence',
      payload: z.object({ n: z.number() }),
      maxAttempts: 1,
      handler: async ({ n }, ctx) => {
        // What a pooler that moves connections does: the client believes its statements parsed.
        if (n === 2) await one.query('DEALLOCATE ALL');
        await ctx.completeWith(async (tx) => {
          calls += 1;
          await tx.query(`INSERT INTO side VALUES ($1)`, [`lost fence ${n}`]);
        });
      },
    });
    const first = await client.enqueue(def, { n: 1 });
    const second = await client.enqueue(def, { n: 2 });
    const worker = testWorker(one, [def], { logger: logs.logger, concurrency: 1, maxPrefetch: 0 });
    expect(await worker.runOnce()).toBe(1);
    expect(await worker.runOnce()).toBe(1);
    // The fence of the second failed with 26000 before its work ran; run again, unnamed, once.
    expect(calls).toBe(2);
    expect(logs.reasons()).toContain('prepared_statements_off');
    for (const { id } of [first, second]) {
      expect(await jobRow(db.pool, id)).toMatchObject({ status: 'completed', attempts: 1 });
    }
    expect(await notes()).toEqual(['lost fence 1', 'lost fence 2']);
  });
});
