import type { SQL } from 'drizzle-orm';
import { beforeAll, describe, expect, it } from 'vitest';
import { readSagas } from '../src/index.js';
import { selectSagaReach, selectSagas } from '../src/sql/read.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { explainAnalyze, rowsExamined } from '../../../test/support/explain.js';

const db = await useTestDatabase();

// 60,000 `order` sagas, newest first `order-1`, and only the 40 oldest of version 1 (the rest
// version 2): a sparse filter, whose matches sit at the far end of every index it could walk.
beforeAll(async () => {
  await db.pool.query(`
    INSERT INTO skiplock.sagas (id, name, version, status, input, created_at)
    SELECT 'order-' || g, 'order', CASE WHEN g > 59960 THEN 1 ELSE 2 END,
           CASE WHEN g > 59960 THEN 'failed' ELSE 'completed' END::skiplock.saga_status,
           '{}'::jsonb, now() - g * interval '1 second'
    FROM generate_series(1, 60000) g;
    ANALYZE skiplock.sagas`);
});

const explain = (query: SQL) => explainAnalyze(db.pool, query);

describe('saga list window', () => {
  const WINDOW = 20_000;

  it.each([
    ['name and version', { name: 'order', version: 1 }],
    ['name and status', { name: 'order', statuses: ['failed' as const] }],
    ['version alone', { version: 1 }],
    ['several statuses', { statuses: ['failed' as const, 'cancelled' as const] }],
  ])('a sparse %s filter reads at most the window', async (_, filter) => {
    const query = { ...filter, limit: 51, scanLimit: WINDOW };
    for (const sql of [selectSagas(query), selectSagaReach(query)]) {
      const plan = await explain(sql);
      expect(plan).not.toMatch(/Seq Scan/);
      const examined = rowsExamined(plan);
      expect(examined).toBeGreaterThan(0);
      expect(examined).toBeLessThanOrEqual(WINDOW);
    }
  });

  it('a short page carries a cursor that searches older, until the matches are found', async () => {
    let cursor: string | undefined;
    const found: string[] = [];
    const pages: { n: number; complete: boolean | undefined }[] = [];
    for (let i = 0; i < 10; i++) {
      const page = await readSagas(db.pool, {
        name: 'order',
        version: 1,
        limit: 50,
        scanLimit: WINDOW,
        cursor,
      });
      found.push(...page.sagas.map((s) => s.id));
      pages.push({ n: page.sagas.length, complete: page.complete });
      if (!page.nextCursor) break;
      cursor = page.nextCursor;
    }
    // Windows of 20,000: the first two hold none, the third all 40; it was full, so one more
    // (empty) window shows there is nothing older.
    expect(pages).toEqual([
      { n: 0, complete: false },
      { n: 0, complete: false },
      { n: 40, complete: false },
      { n: 0, complete: true },
    ]);
    expect(found).toHaveLength(40);
    expect(found[0]).toBe('order-59961');
    expect(new Set(found).size).toBe(40);
  });

  it('a filter the index settles alone pages as before', async () => {
    const page = await readSagas(db.pool, { name: 'order', limit: 50 });
    expect(page.sagas).toHaveLength(50);
    expect(page.complete).toBe(true);
    const next = await readSagas(db.pool, { name: 'order', limit: 50, cursor: page.nextCursor! });
    expect(next.sagas[0]!.id).toBe('order-51');
  });
});
