import { beforeAll, describe, expect, it } from 'vitest';
import { selectWaitingSagas, type WaitingSagaRow } from '../src/sql/reconcile.js';
import { runSql } from '@skiplock/queue/engine';
import { useTestDatabase } from '../../../test/support/db.js';
import { explainAnalyze, rowsExamined } from '../../../test/support/explain.js';

const db = await useTestDatabase();
const WAITING = 200_000;

// Sagas pile up waiting: a month's sleep, a human's approval. 200,000 of them, started over two
// days, most of them moved (updated) since in another order than their start, beside 50,000
// finished ones.
beforeAll(async () => {
  await db.pool.query(`
    INSERT INTO skiplock.sagas (id, name, version, status, input, current_step, created_at, updated_at)
    SELECT 'sleep-' || g, 'renewal', 1, 'waiting', '{}'::jsonb, 'nap',
           now() - g * interval '1 second', now() - (g * 7919 % ${WAITING}) * interval '1 second'
    FROM generate_series(1, ${WAITING}) g;
    INSERT INTO skiplock.sagas (id, name, version, status, input, created_at)
    SELECT 'done-' || g, 'renewal', 1, 'completed', '{}'::jsonb, now() - g * interval '1 second'
    FROM generate_series(1, 50000) g;
    ANALYZE skiplock.sagas`);
});

describe("the reconciler's page of waiting sagas", () => {
  it('reads its page, not every waiting saga, from the start and after a cursor', async () => {
    const first = await explainAnalyze(db.pool, selectWaitingSagas(100, null));
    expect(first).toContain('sagas_status_created_idx');
    // Ordered by updated_at it read and sorted all 200,000 waiting sagas each page.
    expect(rowsExamined(first)).toBeLessThanOrEqual(100);
    const after = { createdAt: new Date(Date.now() - 86_400_000).toISOString(), id: 'x' };
    const later = await explainAnalyze(db.pool, selectWaitingSagas(100, after));
    expect(later).toContain('sagas_status_created_idx');
    expect(rowsExamined(later)).toBeLessThanOrEqual(100);
  });

  it('pages through every waiting saga once, oldest first, each page after the last', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const seen = new Set<string>();
      let cursor: { createdAt: string; id: string } | null = null;
      let previous = '';
      for (let pages = 0; pages < 3; pages++) {
        const page: { rows: WaitingSagaRow[] } = await runSql<WaitingSagaRow>(
          client,
          selectWaitingSagas(1_000, cursor),
        );
        const rows = page.rows;
        expect(rows).toHaveLength(1_000);
        for (const row of rows) {
          expect(seen.has(row.id)).toBe(false);
          seen.add(row.id);
          // Oldest first: sleep-200000 started first.
          expect(row.created_at >= previous).toBe(true);
          previous = row.created_at;
        }
        cursor = { createdAt: rows.at(-1)!.created_at, id: rows.at(-1)!.id };
      }
      expect(seen.has(`sleep-${WAITING}`)).toBe(true);
      expect(seen.has(`sleep-${WAITING - 2_999}`)).toBe(true);
      expect(seen.size).toBe(3_000);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });
});
