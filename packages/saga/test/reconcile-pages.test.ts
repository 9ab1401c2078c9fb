import { beforeAll, describe, expect, it } from 'vitest';
import {
  selectStrandedParents,
  selectWaitingSagas,
  type StrandedPageRow,
  type WaitingSagaRow,
} from '../src/sql/reconcile.js';
import { runSql } from '@skiplock/queue/engine';
import { useTestDatabase } from '../../../test/support/db.js';
import { explainAnalyze, rowsExamined } from '../../../test/support/explain.js';

const db = await useTestDatabase();
const WAITING = 200_000;

// Sagas pile up waiting: a month's sleep, a human's approval. 200,000 of them, started over two
// days, most of them moved (updated) since in another order than their start, beside finished
// ones, which stay in the table: 100,000 orders, each with a finished branch (a child saga).
// The newest waiting saga is a parent whose child ended unseen.
beforeAll(async () => {
  await db.pool.query(`
    INSERT INTO skiplock.sagas (id, name, version, status, input, current_step, current_kind,
                                created_at, updated_at)
    SELECT 'sleep-' || g, 'renewal', 1, 'waiting', '{}'::jsonb, 'nap', 'step',
           now() - g * interval '1 second', now() - (g * 7919 % ${WAITING}) * interval '1 second'
    FROM generate_series(1, ${WAITING}) g;
    INSERT INTO skiplock.sagas (id, name, version, status, input, created_at)
    SELECT 'done-' || g, 'order', 1, 'completed', '{}'::jsonb, now() - g * interval '1 second'
    FROM generate_series(1, 100000) g;
    INSERT INTO skiplock.sagas (id, name, version, status, input, created_at, parent_id, parent_step)
    SELECT 'done-' || g || '/ship', 'shipping', 1, 'completed', '{}'::jsonb,
           now() - g * interval '1 second', 'done-' || g, 'ship'
    FROM generate_series(1, 100000) g;
    INSERT INTO skiplock.sagas (id, name, version, status, input, current_step, current_kind)
    VALUES ('stranded', 'order', 1, 'waiting', '{}'::jsonb, 'ship', 'step');
    INSERT INTO skiplock.sagas (id, name, version, status, input, parent_id, parent_step)
    VALUES ('stranded/ship', 'shipping', 1, 'completed', '{}'::jsonb, 'stranded', 'ship');
    ANALYZE skiplock.sagas`);
});

describe("the reconciler's pages of waiting sagas and of parents", () => {
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

  it('reads a page of parents, not every saga that ever ran, and finds the stranded one', async () => {
    const plan = await explainAnalyze(db.pool, selectStrandedParents(100, 1_000, null));
    expect(plan).toContain('sagas_status_created_idx');
    expect(plan).toContain('sagas_parent_idx');
    // Joining every parent to every ended child read all 200,000 finished sagas each pass.
    expect(rowsExamined(plan)).toBeLessThanOrEqual(1_000);
    // Page after page, each after the last one read, to the one stranded parent at the end.
    let cursor: { createdAt: string; id: string } | null = null;
    const found: StrandedPageRow[] = [];
    let pages = 0;
    for (; pages < 250 && found.length === 0; pages++) {
      const page: { rows: StrandedPageRow[] } = await runSql<StrandedPageRow>(
        db.pool,
        selectStrandedParents(100, 1_000, cursor),
      );
      const [first] = page.rows;
      found.push(...page.rows.filter((r) => r.id !== null));
      if (found.length === 0) {
        // A page with none says where it ended, in one row.
        expect(page.rows).toHaveLength(1);
        expect(first).toMatchObject({ id: null, scanned: 1_000 });
      }
      cursor = { createdAt: first!.page_end_at, id: first!.page_end_id };
    }
    // 200,001 waiting sagas, 1,000 a page: the stranded parent, started last, is on the last.
    expect(pages).toBe(201);
    expect(found).toMatchObject([
      {
        id: 'stranded/ship',
        parent: 'stranded',
        parent_name: 'order',
        parent_version: 1,
        parent_step: 'ship',
        scanned: 1,
      },
    ]);
  });
});
