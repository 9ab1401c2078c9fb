import { PgDialect } from 'drizzle-orm/pg-core';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, createRetention, defineJob } from '../src/index.js';
import { pruneJobs } from '../src/sql/retention.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { countByStatus, quiet, testWorker } from './fixtures.js';
import { metricValue } from '../../../test/support/metrics.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

const churn = defineJob({
  type: 'churn',
  queue: 'churn',
  payload: z.object({ n: z.number() }),
  handler: async () => {},
});

async function tableRows(): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM skiplock.jobs',
  );
  return rows[0]!.n;
}

describe('retention', () => {
  it('keeps the jobs table bounded while jobs keep flowing', async () => {
    const retention = createRetention({
      pool: db.pool,
      logger: quiet,
      completedAgeMs: 0,
      deadAgeMs: 0,
      batchSize: 200,
    });
    const worker = testWorker(db.pool, [churn], { concurrency: 50 });
    const sizes: number[] = [];
    for (let round = 0; round < 20; round++) {
      await client.enqueueMany(
        churn,
        Array.from({ length: 100 }, (_, n) => ({ payload: { n } })),
      );
      while ((await worker.runOnce()) > 0);
      await retention.runOnce();
      sizes.push(await tableRows());
    }
    // 2,000 jobs flowed through; the table never held more than one round's worth.
    expect(Math.max(...sizes)).toBeLessThanOrEqual(100);
    expect(await metricValue(retention.metrics, 'skiplock_jobs_pruned_total')).toBe(2_000);
  });

  it('prunes completed jobs after their age and dead jobs only after the longer one', async () => {
    const retention = createRetention({
      pool: db.pool,
      logger: quiet,
      completedAgeMs: 60_000,
      deadAgeMs: 3_600_000,
    });
    await db.pool.query(`
      INSERT INTO skiplock.jobs (job_type, status, updated_at) VALUES
        ('old-done', 'completed', now() - interval '2 minutes'),
        ('new-done', 'completed', now()),
        ('old-dead', 'dead', now() - interval '2 minutes'),
        ('older-dead', 'dead', now() - interval '2 hours'),
        ('waiting', 'pending', now() - interval '2 hours')`);
    const result = await retention.runOnce();
    expect(result).toMatchObject({ ran: true, deleted: 2, byStatus: { completed: 1, dead: 1 } });
    const { rows } = await db.pool.query<{ job_type: string }>(
      'SELECT job_type FROM skiplock.jobs ORDER BY job_type',
    );
    expect(rows.map((r) => r.job_type)).toEqual(['new-done', 'old-dead', 'waiting']);
    expect(await countByStatus(db.pool)).toMatchObject({ pending: 1 });
  });

  it('keeps a cancelled job whose stopped run still holds its lease, whatever its age', async () => {
    await db.pool.query('DELETE FROM skiplock.jobs');
    const retention = createRetention({ pool: db.pool, logger: quiet, completedAgeMs: 0 });
    // Stopped while they ran (`cancelJob(id, { running: true })`): one whose handler has not
    // returned (its lease kept, and its concurrency slot with it), one whose lease ran out (its
    // worker gone), one whose worker gave the lease back; and one cancelled before it ran.
    await db.pool.query(`
      INSERT INTO skiplock.jobs (job_type, status, attempts, locked_by, lease_expires_at,
                                 concurrency_key, concurrency_limit, updated_at) VALUES
        ('stopping', 'cancelled', 1, 'w', now() + interval '5 minutes', 'k', 1,
         now() - interval '2 minutes'),
        ('ran-out', 'cancelled', 1, 'w', now() - interval '1 second', 'k', 1,
         now() - interval '2 minutes'),
        ('released', 'cancelled', 1, 'w', NULL, 'k', 1, now() - interval '2 minutes'),
        ('queued', 'cancelled', 0, NULL, NULL, NULL, NULL, now() - interval '2 minutes')`);
    // Before: deleted under its handler still working, the key's next job could start.
    expect(await retention.runOnce()).toMatchObject({ deleted: 3, byStatus: { cancelled: 3 } });
    const { rows } = await db.pool.query<{ job_type: string }>(
      'SELECT job_type FROM skiplock.jobs',
    );
    expect(rows.map((r) => r.job_type)).toEqual(['stopping']);
  });

  it('walks the retention index per status: a batch reads its own rows, not the whole backlog', async () => {
    await db.pool.query('DELETE FROM skiplock.jobs');
    // A backlog: 150,000 finished jobs all past their age (retention was off for a while).
    await db.pool.query(`
      INSERT INTO skiplock.jobs (job_type, status, updated_at)
      SELECT 'backlog', (ARRAY['completed', 'cancelled', 'dead'])[1 + g % 3]::skiplock.job_status,
             '2020-01-01T00:00:00Z'::timestamptz + g * interval '1 second'
      FROM generate_series(1, 150000) g;
      ANALYZE skiplock.jobs`);
    const query = new PgDialect().sqlToQuery(
      pruneJobs({ completedAgeMs: 7 * 86_400_000, deadAgeMs: 30 * 86_400_000, limit: 500 }),
    );
    const client = await db.pool.connect();
    let plan: string;
    try {
      await client.query('BEGIN');
      const { rows } = await client.query<{ 'QUERY PLAN': string }>(
        `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) ${query.sql}`,
        query.params,
      );
      plan = rows.map((r) => r['QUERY PLAN']).join('\n');
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
    // Before: a scan of every expired row and a sort of all 150,000, for each batch of 500.
    expect(plan).not.toMatch(/Seq Scan on jobs/);
    const read = Math.max(...[...plan.matchAll(/actual rows=(\d+)/g)].map((m) => Number(m[1])));
    expect(read).toBeLessThanOrEqual(3 * 500);
    // Oldest first across the statuses, and the right ages still apply.
    const retention = createRetention({
      pool: db.pool,
      logger: quiet,
      completedAgeMs: 7 * 86_400_000,
      deadAgeMs: 100 * 365 * 86_400_000,
      batchSize: 500,
      maxBatches: 1,
    });
    expect((await retention.runOnce()).deleted).toBe(500);
    const { rows } = await db.pool.query<{ status: string; n: number }>(`
      SELECT status, count(*)::int AS n FROM skiplock.jobs
      WHERE updated_at <= '2020-01-01T00:00:00Z'::timestamptz + 751 * interval '1 second'
      GROUP BY status ORDER BY status::text`);
    // The 500 oldest completed and cancelled (g = 1 to 750) are gone, and no dead job: too young.
    expect(rows).toEqual([
      { status: 'cancelled', n: 1 },
      { status: 'dead', n: 250 },
    ]);
  }, 60_000);

  it('locks only the rows a batch deletes', async () => {
    await db.pool.query('DELETE FROM skiplock.jobs');
    await db.pool.query(`
      INSERT INTO skiplock.jobs (job_type, status, updated_at)
      SELECT 'old', (ARRAY['completed', 'cancelled', 'dead'])[1 + g % 3]::skiplock.job_status,
             '2020-01-01T00:00:00Z'::timestamptz + g * interval '1 second'
      FROM generate_series(1, 6) g`);
    const query = new PgDialect().sqlToQuery(
      pruneJobs({ completedAgeMs: 86_400_000, deadAgeMs: 86_400_000, limit: 2 }),
    );
    const pruning = await db.pool.connect();
    const other = await db.pool.connect();
    try {
      await pruning.query('BEGIN');
      const deleted = await pruning.query(query.sql, query.params);
      expect(deleted.rowCount).toBe(2);
      // Only the two rows it deletes are locked: every other expired job can be taken at once
      // by another transaction (before: the batch held two of each status, six in all).
      const { rows } = await other.query<{ id: string }>(
        "SELECT id::text FROM skiplock.jobs WHERE job_type = 'old' ORDER BY id",
      );
      let locked = 0;
      for (const { id } of rows) {
        await other.query('BEGIN');
        await other
          .query('SELECT 1 FROM skiplock.jobs WHERE id = $1 FOR UPDATE NOWAIT', [id])
          .catch((error: { code?: string }) => {
            if (error.code !== '55P03') throw error;
            locked++;
          });
        await other.query('ROLLBACK');
      }
      expect(locked).toBe(2);
    } finally {
      await pruning.query('ROLLBACK');
      pruning.release();
      await other.query('ROLLBACK').catch(() => {});
      other.release();
    }
  });
});
