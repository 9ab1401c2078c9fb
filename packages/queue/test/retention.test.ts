import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, createRetention, defineJob } from '../src/index.js';
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
});
