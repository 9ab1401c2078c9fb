import { beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '../src/index.js';
import { selectJobs } from '../src/sql/admin.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { explainAnalyze, rowsExamined } from '../../../test/support/explain.js';
import { quiet } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

// A tenant key with a long history (300,000 of its jobs completed, each holding its one slot in
// its time), a backlog of 100,000 pending jobs of no key, and today one job of the key running:
// the oldest of them all, so a walk from the newest id meets it last.
beforeAll(async () => {
  await db.pool.query(`
    INSERT INTO skiplock.jobs (id, queue, job_type, status, attempts, locked_by, lease_expires_at,
                               concurrency_key, concurrency_limit)
    OVERRIDING SYSTEM VALUE
    VALUES (5, 'tenants', 'sync', 'processing', 1, 'w-1', now() + interval '1 minute', 'tenant:hot', 1);
    INSERT INTO skiplock.jobs (id, queue, job_type, status, attempts, completed_at, concurrency_key,
                               concurrency_limit)
    OVERRIDING SYSTEM VALUE
    SELECT g, 'tenants', 'sync', 'completed', 1, now(), 'tenant:hot', 1
    FROM generate_series(1000, 300999) g;
    INSERT INTO skiplock.jobs (id, queue, job_type, status)
    OVERRIDING SYSTEM VALUE
    SELECT g, 'tenants', 'sync', 'pending' FROM generate_series(301000, 400999) g;
    INSERT INTO skiplock.jobs (id, queue, job_type, status, concurrency_key, concurrency_limit)
    OVERRIDING SYSTEM VALUE VALUES (401000, 'tenants', 'sync', 'waiting', 'tenant:hot', 1);
    ANALYZE skiplock.jobs`);
});

describe("a waiting job's slot holders", () => {
  it('are read through the slot index, not by walking every job from the newest', async () => {
    const filter = { concurrencyKey: 'tenant:hot', holdingSlot: true, limit: 20 };
    const plan = await explainAnalyze(db.pool, selectJobs(filter));
    expect(plan).toContain('jobs_slot_holders_idx');
    // Before: a backward walk of the primary key, every job read (401,001) for one holder.
    expect(rowsExamined(plan)).toBeLessThanOrEqual(20);
    expect((await client.listJobs(filter)).map((j) => j.id)).toEqual(['5']);
    // Keyset paging still holds.
    expect(await client.listJobs({ ...filter, beforeId: '5' })).toEqual([]);
  });
});
