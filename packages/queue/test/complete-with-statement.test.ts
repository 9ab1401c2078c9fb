import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { completeWithStatement, type Statement } from '../src/engine.js';
import { createClient, defineJob } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { jobRow, quiet, testWorker } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

/** The statement a caller sends with the fence: a write whose row the test looks for after. */
const mark = (jobId: string): Statement => ({
  name: 'complete_with_statement_mark',
  text: 'INSERT INTO public.marks (job_id) VALUES ($1) RETURNING job_id, 1 AS one',
  values: [jobId],
});

const marked = async (jobId: string) =>
  (await db.pool.query('SELECT 1 FROM public.marks WHERE job_id = $1', [jobId])).rowCount;

beforeAll(async () => {
  await db.pool.query('CREATE TABLE public.marks (job_id text PRIMARY KEY)');
});
afterAll(async () => {
  await db.pool.query('DROP TABLE public.marks');
});

/**
 * A pool of one connection (so statements stay parsed from job to job) that counts its `query`
 * calls: each is one round trip, a statement or a write of several.
 */
function countingPool(): { pool: pg.Pool; calls: { n: number } } {
  const pool = new pg.Pool({ connectionString: db.url, max: 1 });
  pool.on('error', () => {});
  const calls = { n: 0 };
  pool.on('connect', (c) => {
    const query = c.query.bind(c) as (...args: unknown[]) => unknown;
    (c as unknown as { query: (...args: unknown[]) => unknown }).query = (...args) => {
      calls.n += 1;
      return query(...args);
    };
  });
  return { pool, calls };
}

describe('completeWithStatement', () => {
  it("sends the statement in the fence's write, gives work its outcome, and commits them together", async () => {
    // One connection for the whole worker, so every job after the first finds both statements
    // parsed; each of its `query` calls is one round trip (a statement, or a write of several).
    const { pool, calls } = countingPool();
    const perJob: number[] = [];
    const outcomes: unknown[] = [];
    const job = defineJob({
      type: 'with-statement',
      payload: z.object({}),
      handler: async (_p, ctx) => {
        const before = calls.n;
        await completeWithStatement(ctx, mark(ctx.job.id), async (_tx, first) => {
          outcomes.push(first.rows);
        });
        perJob.push(calls.n - before);
      },
    });
    const ids: string[] = [];
    try {
      const worker = testWorker(pool, [job]);
      for (let i = 0; i < 4; i++) {
        const { id } = await client.enqueue(job, {});
        ids.push(id);
        await worker.runOnce();
      }
    } finally {
      await pool.end();
    }
    for (const id of ids) {
      expect((await jobRow(db.pool, id)).status).toBe('completed');
      expect(await marked(id)).toBe(1);
    }
    expect(outcomes).toEqual(ids.map((id) => [{ job_id: id, one: 1 }]));
    // The first, on a connection that parsed neither: BEGIN, the fence, the statement, COMMIT.
    // Then BEGIN, the fence and the statement in one write, and COMMIT: one round trip fewer
    // than sending the statement from work (BEGIN with the fence, the statement, COMMIT).
    expect(perJob).toEqual([4, 2, 2, 2]);
  });

  it('rolls the statement back with the transaction when the fence in its write finds the lock lost', async () => {
    // One connection, warmed by a first job, so that the statement goes in the fence's write; a
    // sequence it advances (nextval is not rolled back) shows that it ran.
    await db.pool.query('CREATE SEQUENCE public.marks_ran');
    const ran = async () =>
      (await db.pool.query<{ n: string }>('SELECT last_value AS n FROM public.marks_ran')).rows[0]!
        .n;
    const counted: Statement = {
      name: 'complete_with_statement_counted',
      text: `INSERT INTO public.marks (job_id) SELECT $1 WHERE nextval('public.marks_ran') > 0
             RETURNING job_id`,
      values: [],
    };
    const { pool, calls } = countingPool();
    let failure: unknown = null;
    let workRan = false;
    let sent = 0;
    const job = defineJob({
      type: 'with-statement-lost',
      payload: z.object({ steal: z.boolean() }),
      maxAttempts: 1,
      handler: async ({ steal }, ctx) => {
        // Another worker took the job meanwhile (as the sweeper would after a lost lease).
        if (steal) {
          await db.pool.query(`UPDATE skiplock.jobs SET locked_by = 'someone-else' WHERE id = $1`, [
            ctx.job.id,
          ]);
        }
        const before = calls.n;
        try {
          await completeWithStatement(ctx, { ...counted, values: [ctx.job.id] }, async () => {
            workRan = steal;
          });
        } catch (error) {
          failure = error;
          throw error;
        } finally {
          sent = calls.n - before;
        }
      },
    });
    try {
      const worker = testWorker(pool, [job]);
      const warm = await client.enqueue(job, { steal: false });
      await worker.runOnce();
      expect(await marked(warm.id)).toBe(1);
      const { id } = await client.enqueue(job, { steal: true });
      const before = await ran();
      await worker.runOnce();
      expect(failure).toMatchObject({ code: 'lock_lost' });
      expect(workRan).toBe(false);
      // One write (BEGIN, the fence, the statement), then ROLLBACK.
      expect(sent).toBe(2);
      // The statement ran in that write, before the fence's outcome was read: rolled back.
      expect(BigInt(await ran())).toBe(BigInt(before) + 1n);
      expect(await marked(id)).toBe(0);
      expect(await jobRow(db.pool, id)).toMatchObject({
        status: 'processing',
        locked_by: 'someone-else',
      });
    } finally {
      await pool.end();
      await db.pool.query('DROP SEQUENCE public.marks_ran');
    }
  });

  it("runs the statement first in work for a context that is not a worker's", async () => {
    const seen: unknown[] = [];
    const jobId = 'not-a-worker';
    // A context of its own: completeWith opens a transaction on the pool and runs work in it.
    const ctx = {
      completeWith: async <T>(work: (tx: pg.PoolClient) => Promise<T>) => {
        const tx = await db.pool.connect();
        try {
          await tx.query('BEGIN');
          const value = await work(tx);
          await tx.query('COMMIT');
          return value;
        } catch (error) {
          await tx.query('ROLLBACK');
          throw error;
        } finally {
          tx.release();
        }
      },
    } as unknown as Parameters<typeof completeWithStatement>[0];
    const prepared: number[] = [];
    await completeWithStatement(ctx, mark(jobId), async (tx, first) => {
      seen.push(first.rows);
      // Unnamed: no runner here knows whether the connection keeps prepared statements.
      const { rows } = await tx.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM pg_prepared_statements WHERE name = $1',
        [mark(jobId).name],
      );
      prepared.push(rows[0]!.n);
    });
    expect(seen).toEqual([[{ job_id: jobId, one: 1 }]]);
    expect(prepared).toEqual([0]);
    expect(await marked(jobId)).toBe(1);
  });
});
