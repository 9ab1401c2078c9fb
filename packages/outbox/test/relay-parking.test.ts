import pg from 'pg';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import {
  createRelay,
  failed,
  publishMany,
  type Delivery,
  type OutboxMessage,
  type Sink,
} from '../src/index.js';
import { runSql } from '@skiplock/queue/engine';
import { PARK_WINDOW, unparkStalledKeys } from '../src/sql/messages.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';

const db = await useTestDatabase();
const silent = pino({ level: 'silent' });
const noBackoff = { baseMs: 0, maxMs: 0, factor: 1, jitter: 0 };

/** Pending messages of `topic` by key: how many, and how many of them are parked. */
async function parking(topic: string) {
  const { rows } = await db.pool.query<{ key: string; pending: number; parked: number }>(
    `SELECT key, count(*)::int AS pending,
            count(*) FILTER (WHERE run_after = 'infinity')::int AS parked
     FROM skiplock.outbox_messages WHERE topic = $1 AND status = 'pending'
     GROUP BY key ORDER BY key`,
    [topic],
  );
  return Object.fromEntries(rows.map((r) => [r.key, { pending: r.pending, parked: r.parked }]));
}

/** A sink that acknowledges every message and records, per key, the payloads in delivery order. */
function recordingSink(answer: (m: OutboxMessage) => Delivery = () => ({ ok: true })) {
  const seen = new Map<string, number[]>();
  const sink: Sink = {
    name: 'recording',
    deliver: async (messages) =>
      messages.map((m) => {
        const result = answer(m);
        if (result.ok)
          seen.set(m.key ?? '', [...(seen.get(m.key ?? '') ?? []), m.payload as number]);
        return result;
      }),
    close: async () => {},
  };
  return { sink, seen };
}

const range = (n: number) => Array.from({ length: n }, (_, i) => i);

/** One page of maintenance's look for stalled keys, with a page size a test can reach. */
async function unstall(after: string, limit: number) {
  const { rows } = await runSql<{ last: string | null; read: number; unstalled: number }>(
    db.pool,
    unparkStalledKeys(after, limit),
  );
  return rows[0]!;
}

describe('relay parking of a key’s backlog', () => {
  it('parks the backlog past the window behind the key’s first message and lets it go one by one, in order', async () => {
    const topic = 'park.window';
    await publishMany(db.pool, [
      ...range(50).map((i) => ({ topic, key: 'long', payload: i })),
      ...range(3).map((i) => ({ topic, key: 'short', payload: i })),
    ]);
    const { sink, seen } = recordingSink();
    const relay = createRelay({ pool: db.pool, sink, logger: silent, topics: [topic] });

    // The first claim takes each key's first message and, not filling its batch, parks the
    // followers past the window: 49 - 8 of the long key, none of the short one.
    expect(await relay.runOnce()).toMatchObject({ claimed: 2, delivered: 2 });
    expect(await parking(topic)).toEqual({
      long: { pending: 49, parked: 49 - PARK_WINDOW },
      short: { pending: 2, parked: 0 },
    });
    // Each delivery of the key's first message unparks the next once the window is used up.
    for (let pass = 0; pass < 60 && (await relay.runOnce()).claimed > 0; pass++);
    expect(seen.get('long')).toEqual(range(50));
    expect(seen.get('short')).toEqual(range(3));
    expect(await parking(topic)).toEqual({});
  });

  it('parks nothing when a claim fills its batch: it stopped at its limit, not at a backlog', async () => {
    const topic = 'park.filled';
    await publishMany(db.pool, [
      ...range(30).map((i) => ({ topic, key: 'long', payload: i })),
      ...range(10).map((i) => ({ topic, key: `single-${i}`, payload: i })),
    ]);
    const { sink } = recordingSink();
    const relay = createRelay({
      pool: db.pool,
      sink,
      logger: silent,
      topics: [topic],
      batchSize: 5,
    });
    expect(await relay.runOnce()).toMatchObject({ claimed: 5 });
    expect((await parking(topic))['long']).toEqual({ pending: 29, parked: 0 });
  });

  it('stalls a key whose parked messages have nothing below them, rather than deliver past them, until they are unparked', async () => {
    // What a relay of an earlier version leaves (found in review): it delivers a key's messages
    // without unparking the next, so the parked ones are left with no message below them.
    const topic = 'park.stranded';
    const ids = await publishMany(
      db.pool,
      range(20).map((i) => ({ topic, key: 'K', payload: i })),
    );
    const { sink, seen } = recordingSink();
    const relay = createRelay({ pool: db.pool, sink, logger: silent, topics: [topic] });
    expect(await relay.runOnce()).toMatchObject({ claimed: 1 });
    await db.pool.query(
      `UPDATE skiplock.outbox_messages SET status = 'delivered', settled_at = now()
       WHERE id = ANY($1::bigint[])`,
      [ids.slice(1, 1 + PARK_WINDOW)],
    );
    await publishMany(db.pool, [{ topic, key: 'K', payload: 20 }]);
    // Message 20 is unparked and due, but parked messages of its key come before it.
    expect(await relay.runOnce()).toMatchObject({ claimed: 0 });
    // The README's remedy: unpark them all; the claims park again what they need to.
    await db.pool.query(
      `UPDATE skiplock.outbox_messages SET run_after = created_at
       WHERE status = 'pending' AND run_after = 'infinity'`,
    );
    for (let pass = 0; pass < 30 && (await relay.runOnce()).claimed > 0; pass++);
    expect(seen.get('K')).toEqual([0, ...range(21).slice(1 + PARK_WINDOW)]);
    expect(await parking(topic)).toEqual({});
  });

  it('has maintenance unpark a stalled key, page by page, and leave a key with a message before its parked ones alone', async () => {
    const topic = 'park.unstall';
    const ids = await publishMany(db.pool, [
      ...range(20).map((i) => ({ topic, key: 'K', payload: i })),
      ...range(20).map((i) => ({ topic, key: 'L', payload: i })),
    ]);
    const { sink, seen } = recordingSink();
    const logs: Record<string, unknown>[] = [];
    const logger = pino({ level: 'warn' }, { write: (l: string) => void logs.push(JSON.parse(l)) });
    const relay = createRelay({ pool: db.pool, sink, logger, topics: [topic] });
    // Both keys' first messages go; each key then has its window unparked and 11 parked.
    expect(await relay.runOnce()).toMatchObject({ claimed: 2 });
    // K's window delivered as a relay of an earlier version would: nothing unparks K's next.
    await db.pool.query(
      `UPDATE skiplock.outbox_messages SET status = 'delivered', settled_at = now()
       WHERE id = ANY($1::bigint[])`,
      [ids.slice(1, 1 + PARK_WINDOW)],
    );
    const [late] = await publishMany(db.pool, [{ topic, key: 'K', payload: 20 }]);
    const parkedBehind = 20 - 1 - PARK_WINDOW;
    expect(await parking(topic)).toEqual({
      K: { pending: parkedBehind + 1, parked: parkedBehind },
      L: { pending: 19, parked: parkedBehind },
    });
    // A page reads parked messages in id order. One that starts past K's first parked message
    // (K's 13th to 16th) still unparks that one, the key's first, not the page's.
    const firstParked = ids[1 + PARK_WINDOW]!;
    expect(await unstall(ids[12]!, 4)).toEqual({ last: ids[16], read: 4, unstalled: 1 });
    const { rows: unparked } = await db.pool.query<{ id: string }>(
      `SELECT id::text FROM skiplock.outbox_messages
       WHERE topic = $1 AND status = 'pending' AND key = 'K' AND run_after <> 'infinity'`,
      [topic],
    );
    expect(unparked.map((r) => r.id)).toEqual([firstParked, late]);
    // Now K has a message before its parked ones, and L its window: every page unparks nothing.
    expect(await unstall('0', 4)).toEqual({ last: ids[13], read: 4, unstalled: 0 });
    expect(await unstall('0', 100)).toMatchObject({ read: 2 * parkedBehind - 1, unstalled: 0 });
    expect(await parking(topic)).toEqual({
      K: { pending: parkedBehind + 1, parked: parkedBehind - 1 },
      L: { pending: 19, parked: parkedBehind },
    });
    // Stalled again as an earlier relay would leave it: the relay's maintenance frees it.
    await db.pool.query(
      `UPDATE skiplock.outbox_messages SET status = 'delivered', settled_at = now() WHERE id = $1`,
      [firstParked],
    );
    expect(await relay.runOnce()).toMatchObject({ claimed: 1 }); // L's, K is held back
    expect(await relay.retainOnce()).toMatchObject({ unstalled: 1 });
    expect(logs.filter((l) => l['reason'] === 'outbox_key_unstalled')).toEqual([
      expect.objectContaining({ keys: 1 }),
    ]);
    for (let pass = 0; pass < 60 && (await relay.runOnce()).claimed > 0; pass++);
    expect(seen.get('K')).toEqual([0, ...range(21).slice(2 + PARK_WINDOW)]);
    expect(seen.get('L')).toEqual(range(20));
    expect(await parking(topic)).toEqual({});
    expect(await relay.retainOnce()).toMatchObject({ unstalled: 0 });
  });

  it('lets a parked key go on when its first message goes dead, waits out a failure, or is sent dead by maintenance', async () => {
    const topic = 'park.ends';
    // Payload 12 of each key fails. By then the window (1..8) is delivered and 12 is its key's
    // first message with parked ones behind it, so each way out of pending has to unpark the next.
    const failing = 12;
    const ids = await publishMany(db.pool, [
      ...range(20).map((i) => ({ topic, key: 'dead', payload: i })),
      ...range(20).map((i) => ({ topic, key: 'retried', payload: i })),
      ...range(20).map((i) => ({ topic, key: 'expired', payload: i })),
    ]);
    const expiredHead = ids[40 + failing]!;
    const tries = new Map<string, number>();
    const { sink, seen } = recordingSink((m) => {
      if (m.payload !== failing) return { ok: true };
      tries.set(m.key!, (tries.get(m.key!) ?? 0) + 1);
      if (m.key === 'dead') return failed('refused', { permanent: true });
      return tries.get(m.key!)! > 1 ? { ok: true } : failed('busy');
    });
    const relay = createRelay({
      pool: db.pool,
      sink,
      logger: silent,
      topics: [topic],
      backoff: noBackoff,
      maxAttempts: 3,
    });
    expect(await relay.runOnce()).toMatchObject({ claimed: 3, delivered: 3 });
    expect(await parking(topic)).toEqual({
      dead: { pending: 19, parked: 19 - PARK_WINDOW },
      retried: { pending: 19, parked: 19 - PARK_WINDOW },
      expired: { pending: 19, parked: 19 - PARK_WINDOW },
    });
    let sentDeadByMaintenance = 0;
    for (let pass = 0; pass < 100; pass++) {
      const { claimed } = await relay.runOnce();
      if (tries.get('expired') === 1 && sentDeadByMaintenance === 0) {
        // As a relay leaves its last attempt when it dies holding it: leased, the lease run out.
        await db.pool.query(
          `UPDATE skiplock.outbox_messages SET attempts = 3, lease_id = gen_random_uuid(),
             lease_until = now() - interval '1 second' WHERE id = $1`,
          [expiredHead],
        );
        sentDeadByMaintenance = (await relay.retainOnce()).expired;
      } else if (claimed === 0) break;
    }
    const without = (n: number) => range(20).filter((i) => i !== n);
    expect(seen.get('dead')).toEqual(without(failing));
    expect(seen.get('retried')).toEqual(range(20));
    expect(seen.get('expired')).toEqual(without(failing));
    expect(tries).toEqual(
      new Map([
        ['dead', 1],
        ['retried', 2],
        ['expired', 1],
      ]),
    );
    expect(sentDeadByMaintenance).toBe(1);
    expect(await parking(topic)).toEqual({});
  });

  it('keeps each key in order, one in flight, under 4 relays and publishers adding to the backlogs', async () => {
    const topic = 'park.race';
    const keys = ['a', 'b', 'c'];
    const perKey = 240;
    const inFlight = new Map<string, number>();
    let mostInFlight = 0;
    const seen = new Map<string, number[]>();
    const sink: Sink = {
      name: 'slow',
      deliver: async (messages) => {
        for (const m of messages) {
          const n = (inFlight.get(m.key!) ?? 0) + 1;
          inFlight.set(m.key!, n);
          mostInFlight = Math.max(mostInFlight, n);
        }
        // Long enough for the other relays' claims and the publishers' commits to land while
        // these are in flight.
        await new Promise((r) => setTimeout(r, 2));
        for (const m of messages) {
          inFlight.set(m.key!, inFlight.get(m.key!)! - 1);
          seen.set(m.key!, [...(seen.get(m.key!) ?? []), m.payload as number]);
        }
        return messages.map(() => ({ ok: true as const }));
      },
      close: async () => {},
    };
    const pools = range(4).map(() => {
      const pool = new pg.Pool({ connectionString: db.url, max: 2 });
      pool.on('error', () => {});
      return pool;
    });
    const relays = pools.map((pool) =>
      createRelay({ pool, sink, logger: silent, topics: [topic], pollIntervalMs: 20 }),
    );
    try {
      for (const relay of relays) await relay.start();
      // Two publishers, each adding bursts of 20 per key in its own transactions; a key's
      // payloads rise with its publish order, which the publish lock makes its commit order.
      let next = 0;
      const publisher = async (after: () => Promise<void>) => {
        while (next < perKey) {
          const from = next;
          next += 20;
          const client = await db.pool.connect();
          try {
            await client.query('BEGIN');
            await publishMany(
              client,
              keys.flatMap((key) => range(20).map((i) => ({ topic, key, payload: from + i }))),
            );
            await client.query('COMMIT');
          } finally {
            client.release();
          }
          await after();
        }
      };
      // Parking has to happen for this to test it: sampled after each burst commits.
      let mostParked = 0;
      const sample = async () => {
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM skiplock.outbox_messages
           WHERE topic = $1 AND status = 'pending' AND run_after = 'infinity'`,
          [topic],
        );
        mostParked = Math.max(mostParked, rows[0]!.n);
      };
      await Promise.all([publisher(sample), publisher(sample)]);
      await waitFor(async () => keys.every((k) => (seen.get(k)?.length ?? 0) >= perKey), {
        what: 'every message delivered',
        timeoutMs: 60_000,
      });
      expect(mostParked).toBeGreaterThan(0);
    } finally {
      await Promise.all(relays.map((r) => r.stop()));
      await Promise.all(pools.map((p) => p.end()));
    }
    // The two publishers interleave their bursts, so a key's payloads are not one run: what
    // holds is that each message came after every one published before it on its key.
    const { rows } = await db.pool.query<{ key: string; payloads: number[] }>(
      `SELECT key, array_agg((payload)::int ORDER BY id) AS payloads
       FROM skiplock.outbox_messages WHERE topic = $1 GROUP BY key`,
      [topic],
    );
    for (const { key, payloads } of rows) expect(seen.get(key)).toEqual(payloads);
    expect(mostInFlight).toBe(1);
    expect(await parking(topic)).toEqual({});
    const { rows: statuses } = await db.pool.query<{ status: string; n: number }>(
      `SELECT status::text, count(*)::int AS n FROM skiplock.outbox_messages WHERE topic = $1
       GROUP BY status`,
      [topic],
    );
    expect(statuses).toEqual([{ status: 'delivered', n: keys.length * perKey }]);
  });
});
