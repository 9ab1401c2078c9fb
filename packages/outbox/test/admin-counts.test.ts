import type { SQL } from 'drizzle-orm';
import { beforeAll, describe, expect, it } from 'vitest';
import { deadMessages, outboxCounts, retryDeadMessages } from '../src/index.js';
import { countMessagesCapped, selectDead } from '../src/sql/messages.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { explainAnalyze } from '../../../test/support/explain.js';

const db = await useTestDatabase();

// 60,000 delivered messages (a day's retention), 2,000 pending (the oldest published an hour
// ago) and 300 dead, analyzed: a page that counts them every few seconds must walk the partial
// indexes and stop at its cap.
beforeAll(async () => {
  await db.pool.query(`
    INSERT INTO skiplock.outbox_messages (topic, key, payload, status, attempts, created_at, settled_at)
    SELECT 'order.paid', 'k' || (g % 500), '{}'::jsonb, 'delivered', 1,
           now() - interval '2 hours', now() - interval '2 hours' + g * interval '1 ms'
    FROM generate_series(1, 60000) g;
    INSERT INTO skiplock.outbox_messages (topic, key, payload, status, attempts, created_at, settled_at, last_error)
    SELECT 'order.paid', 'd' || g, '{}'::jsonb, 'dead', 5, now() - interval '90 minutes', now(), 'HTTP 500'
    FROM generate_series(1, 300) g;
    INSERT INTO skiplock.outbox_messages (topic, key, payload, created_at, run_after)
    SELECT 'order.paid', 'p' || g, '{}'::jsonb, now() - interval '1 hour' + g * interval '1 ms',
           now() - interval '1 hour' + g * interval '1 ms'
    FROM generate_series(1, 2000) g;
    ANALYZE skiplock.outbox_messages`);
});

const explain = (query: SQL) => explainAnalyze(db.pool, query);

describe('outbox counts for a page that refreshes', () => {
  it('walk the pending and settled indexes and stop at the cap', async () => {
    const plan = await explain(countMessagesCapped(500));
    expect(plan).not.toMatch(/Seq Scan|Bitmap Heap Scan/);
    expect(plan).toMatch(/using outbox_messages_pending_idx/);
    expect(plan).toMatch(/using outbox_messages_settled_idx/);
    // Four index scans (three counts and the oldest pending), none past the cap + 1 rows.
    const counted = [...plan.matchAll(/Index (?:Only )?Scan .*actual rows=(\d+) /g)].map((m) =>
      Number(m[1]),
    );
    expect(counted).toHaveLength(4);
    expect(Math.max(...counted)).toBe(501);
    expect(plan).not.toMatch(/Sort|Rows Removed by Filter/);
  });

  it('say which counts reached the cap; without one, count every row', async () => {
    const capped = await outboxCounts(db.pool, { cap: 500 });
    expect(capped).toMatchObject({ pending: 500, delivered: 500, dead: 300 });
    expect(capped.atLeast.sort()).toEqual(['delivered', 'pending']);
    // The first due pending message was published an hour ago.
    expect(capped.oldestPendingMs).toBeGreaterThanOrEqual(3_600_000 - 1_000);
    expect(capped.oldestPendingMs).toBeLessThan(3_600_000 + 60_000);

    const exact = await outboxCounts(db.pool);
    expect(exact).toMatchObject({ pending: 2_000, delivered: 60_000, dead: 300, atLeast: [] });
    expect(Math.abs(exact.oldestPendingMs! - capped.oldestPendingMs!)).toBeLessThan(5_000);

    const wide = await outboxCounts(db.pool, { cap: 100_000 });
    expect(wide).toMatchObject({ pending: 2_000, delivered: 60_000, dead: 300, atLeast: [] });
  });

  it('refuse a cap that is not a positive integer, naming it', async () => {
    for (const cap of [0, -1, 1.5, Number.NaN, 20_000_000]) {
      await expect(outboxCounts(db.pool, { cap })).rejects.toThrow(
        /outboxCounts: cap must be an integer/,
      );
    }
  });
});

describe('deadMessages and retryDeadMessages', () => {
  it('refuse a limit that is not a number and an id that is not a string, naming them', async () => {
    for (const limit of [Number.NaN, '10' as never]) {
      await expect(deadMessages(db.pool, { limit })).rejects.toThrow(
        `deadMessages: limit must be a number (1 to 1,000), not ${String(limit)}`,
      );
    }
    await expect(retryDeadMessages(db.pool, [213 as never])).rejects.toThrow(
      'retryDeadMessages: a message id must be a string, not the number 213',
    );
    await expect(deadMessages(db.pool, { beforeId: 7 as never })).rejects.toThrow(
      'deadMessages: a message id must be a string, not the number 7',
    );
    await expect(retryDeadMessages(db.pool, ['0x1'])).rejects.toThrow('"0x1" is not a message id');
    expect(await deadMessages(db.pool, { limit: 0 })).toHaveLength(1);
  });
});

describe('the dead list', () => {
  it('lists the dead newest first by id through their own index, paging across a change of digits', async () => {
    const plan = await explain(selectDead(51, null));
    // Before: every dead message read from the settled index and sorted, by id as text.
    expect(plan).toMatch(/Index Scan Backward using outbox_messages_dead_idx/);
    expect(plan).not.toMatch(/Sort/);
    // Two dead messages whose ids sort the other way round as text: 999999 before 1000000.
    await db.pool.query(`
      INSERT INTO skiplock.outbox_messages (id, topic, key, payload, status, attempts, settled_at)
      VALUES (999999, 'order.paid', 'x1', '{}', 'dead', 5, now()),
             (1000000, 'order.paid', 'x2', '{}', 'dead', 5, now())`);
    try {
      expect((await deadMessages(db.pool, { limit: 2 })).map((m) => m.id)).toEqual([
        '1000000',
        '999999',
      ]);
      // The next page goes on after 999999: the newest seeded dead message, none skipped.
      const next = await deadMessages(db.pool, { limit: 2, beforeId: '999999' });
      expect(next.map((m) => m.id)).toEqual(['60300', '60299']);
    } finally {
      await db.pool.query('DELETE FROM skiplock.outbox_messages WHERE id IN (999999, 1000000)');
    }
  });
});
