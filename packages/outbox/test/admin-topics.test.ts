import { beforeAll, describe, expect, it } from 'vitest';
import { pendingByTopic } from '../src/index.js';
import { countPendingByTopic } from '../src/sql/messages.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { explainAnalyze } from '../../../test/support/explain.js';

const db = await useTestDatabase();

// 100,000 rows: 70,000 delivered, and 30,000 pending over 40 topics, published over the last
// 30 minutes; topic `t39` (no relay serves it) has 5 due since a day, and `t38` 50 parked
// behind their keys' first messages. Analyzed, as a table in service is.
beforeAll(async () => {
  await db.pool.query(`
    INSERT INTO skiplock.outbox_messages (topic, key, payload, status, attempts, created_at, settled_at)
    SELECT 't' || (g % 40), 'k' || (g % 500), '{}'::jsonb, 'delivered', 1,
           now() - interval '2 hours', now() - interval '2 hours' + g * interval '1 ms'
    FROM generate_series(1, 70000) g;
    INSERT INTO skiplock.outbox_messages (topic, key, payload, created_at, run_after)
    SELECT 't' || (g % 38), 'p' || g, '{}'::jsonb, now() - interval '30 minutes' + g * interval '50 ms',
           now() - interval '30 minutes' + g * interval '50 ms'
    FROM generate_series(1, 29945) g;
    INSERT INTO skiplock.outbox_messages (topic, key, payload, created_at, run_after)
    SELECT 't39', 'retired-' || g, '{}'::jsonb, now() - interval '1 day', now() - interval '1 day'
    FROM generate_series(1, 5) g;
    INSERT INTO skiplock.outbox_messages (topic, key, payload, created_at, run_after)
    SELECT 't38', 'p' || g, '{}'::jsonb, now() - interval '2 hours', 'infinity'
    FROM generate_series(1, 50) g;
    ANALYZE skiplock.outbox_messages`);
});

describe('pendingByTopic', () => {
  it('reads the first due pending messages through the claim’s index and stops at the cap', async () => {
    const plan = await explainAnalyze(db.pool, countPendingByTopic(10_000, 20));
    expect(plan).not.toMatch(/Seq Scan|Bitmap Heap Scan/);
    expect(plan).toMatch(/Index Scan using outbox_messages_pending_idx .*actual rows=10000 /);
    expect(plan).toMatch(/Index Scan using outbox_messages_pkey/);
  });

  it('names the topic no relay serves first, with its oldest message, and sums the topics past the limit', async () => {
    const all = await pendingByTopic(db.pool, { cap: 100_000, limit: 1_000 });
    expect(all.atLeast).toBe(false);
    expect(all.others).toBeNull();
    expect(all.topics.reduce((n, t) => n + t.pending, 0)).toBe(30_000);
    expect(all.topics).toHaveLength(40);
    expect(all.topics.slice(0, 2)).toMatchObject([
      { topic: 't39', pending: 5, oldestKey: 'retired-1' },
      { topic: 't38', pending: 50 },
    ]);
    expect(all.topics[0]!.oldestPendingMs).toBeGreaterThan(86_000_000);

    // Capped, the first 10,000 due are read: parked messages are due last, so `t38` is left
    // out, and `t39`, due for a day, comes first.
    const capped = await pendingByTopic(db.pool, { limit: 1_000 });
    expect(capped.topics.map((t) => t.topic)).not.toContain('t38');
    const some = await pendingByTopic(db.pool, { limit: 3 });
    expect(some.atLeast).toBe(true);
    expect(some.topics[0]).toMatchObject({ topic: 't39', pending: 5, oldestKey: 'retired-1' });
    expect(some.topics).toHaveLength(3);
    expect(some.others).toMatchObject({ topics: 36 });
    expect(some.topics.reduce((n, t) => n + t.pending, some.others!.pending)).toBe(10_000);
    expect(some.others!.oldestPendingMs).toBeLessThanOrEqual(some.topics[2]!.oldestPendingMs);
  });

  it('refuses a limit or a cap that is not a positive integer, naming it', async () => {
    await expect(pendingByTopic(db.pool, { limit: 0 })).rejects.toThrow(
      'pendingByTopic: limit must be an integer from 1 to 1,000, not 0',
    );
    await expect(pendingByTopic(db.pool, { cap: 1.5 })).rejects.toThrow(
      'pendingByTopic: cap must be an integer from 1 to 10,000,000, not 1.5',
    );
  });
});
