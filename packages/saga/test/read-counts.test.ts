import type { SQL } from 'drizzle-orm';
import { beforeAll, describe, expect, it } from 'vitest';
import { readSagaCounts, readSagaNames, readSagas } from '../src/index.js';
import { countSagasByStatus, selectSagaNames, selectSagas } from '../src/sql/read.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { explainAnalyze } from '../../../test/support/explain.js';

const db = await useTestDatabase();

// 60,000 finished sagas of three definitions and a few live ones, analyzed: the dashboard's saga
// reads must go through the saga table's indexes and stop at their caps.
beforeAll(async () => {
  await db.pool.query(`
    INSERT INTO skiplock.sagas (id, name, version, status, input, created_at)
    SELECT 'done-' || g, (ARRAY['order', 'refund', 'billing'])[1 + g % 3], 1 + g % 2,
           'completed', '{}'::jsonb, now() - g * interval '1 second'
    FROM generate_series(1, 60000) g;
    INSERT INTO skiplock.sagas (id, name, version, status, input)
    SELECT 'live-' || g, 'order', 2, (ARRAY['running', 'waiting', 'compensating', 'failed'])[1 + g % 4]::skiplock.saga_status, '{}'::jsonb
    FROM generate_series(1, 40) g;
    ANALYZE skiplock.sagas`);
});

const explain = (query: SQL) => explainAnalyze(db.pool, query);

describe('saga reads for the dashboard', () => {
  it('count each status through the status index, stopping at the cap', async () => {
    const plan = await explain(countSagasByStatus(['completed', 'waiting'], 500));
    // The rare status through the status index; the common one either way, stopping at the cap.
    expect(plan).toMatch(/Index Only Scan Backward using sagas_status_created_idx/);
    expect(plan).not.toMatch(/Seq Scan/);
    expect(plan).toMatch(/actual rows=501 /);
    const removed = [...plan.matchAll(/Rows Removed by Filter: (\d+)/g)].map((m) => Number(m[1]));
    expect(Math.max(0, ...removed)).toBeLessThan(2_000);
    const counts = await readSagaCounts(db.pool, { cap: 500 });
    expect(counts.counts).toMatchObject({ completed: 501, running: 10, waiting: 10, failed: 10 });
    expect(counts.atLeast).toEqual(['completed']);
  });

  it('list the definition names by a skip scan of the name index', async () => {
    const plan = await explain(selectSagaNames(100));
    expect(plan).toMatch(/Index Only Scan using sagas_name_created_idx/);
    expect(plan).not.toMatch(/Seq Scan/);
    expect(await readSagaNames(db.pool)).toEqual(['billing', 'order', 'refund']);
  });

  it('filter by definition and version through the name index, newest first', async () => {
    const plan = await explain(selectSagas({ name: 'order', version: 2, limit: 51 }));
    expect(plan).toMatch(/Index Scan Backward using sagas_name_created_idx/);
    expect(plan).not.toMatch(/Seq Scan|Sort/);
    const page = await readSagas(db.pool, { name: 'order', version: 2, limit: 50 });
    expect(page.sagas.map((s) => s.id)).toHaveLength(50);
    expect(page.sagas.every((s) => s.name === 'order' && s.version === 2)).toBe(true);
    await expect(readSagas(db.pool, { version: 0 })).rejects.toThrow(/version/);
  });
});
