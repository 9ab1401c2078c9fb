import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import {
  createRelay,
  failed,
  killPendingMessages,
  pendingByTopic,
  publishMany,
  retryDeadMessages,
  type Delivery,
  type OutboxMessage,
  type Sink,
} from '../src/index.js';
import { PARK_WINDOW } from '../src/sql/messages.js';
import { useTestDatabase } from '../../../test/support/db.js';

const db = await useTestDatabase();
const silent = pino({ level: 'silent' });
const anHour = { baseMs: 3_600_000, maxMs: 3_600_000, factor: 1, jitter: 0 };

/** A sink that records, per key, the payloads it acknowledged in delivery order. */
function recordingSink(answer: (m: OutboxMessage) => Delivery = () => ({ ok: true })) {
  const seen = new Map<string, unknown[]>();
  const sink: Sink = {
    name: 'recording',
    deliver: async (messages) =>
      messages.map((m) => {
        const result = answer(m);
        if (result.ok) seen.set(m.key ?? '', [...(seen.get(m.key ?? '') ?? []), m.payload]);
        return result;
      }),
    close: async () => {},
  };
  return { sink, seen };
}

async function rows(ids: readonly string[]) {
  const { rows } = await db.pool.query<{
    id: string;
    status: string;
    last_error: string | null;
    lease_id: string | null;
    lease_until: Date | null;
  }>(
    `SELECT id::text, status::text, last_error, lease_id::text, lease_until
     FROM skiplock.outbox_messages WHERE id = ANY($1::bigint[]) ORDER BY id`,
    [ids],
  );
  return rows;
}

async function drain(relay: { runOnce(): Promise<{ claimed: number }> }) {
  for (let pass = 0; pass < 100; pass++) if ((await relay.runOnce()).claimed === 0) return;
  throw new Error('the relay did not run dry in 100 passes');
}

describe('killPendingMessages', () => {
  it('kills a message of a topic no relay serves, which held its key on another topic, and retry sends it again', async () => {
    const [retired, held, other] = await publishMany(db.pool, [
      { topic: 'retired.topic', key: 'order-9', payload: 1 },
      { topic: 'orders', key: 'order-9', payload: 2 },
      { topic: 'orders', key: 'order-10', payload: 3 },
    ]);
    const { sink, seen } = recordingSink();
    const relay = createRelay({ pool: db.pool, sink, logger: silent, topics: ['orders'] });
    await drain(relay);
    await relay.retainOnce();
    expect(seen).toEqual(new Map([['order-10', [3]]]));
    expect((await rows([retired!, held!, other!])).map((r) => r.status)).toEqual([
      'pending',
      'pending',
      'delivered',
    ]);

    // The topic no relay serves is named, with the message that holds the key, oldest first.
    const byTopic = await pendingByTopic(db.pool);
    expect(byTopic.topics.map((t) => [t.topic, t.pending, t.oldestId, t.oldestKey])).toEqual([
      ['retired.topic', 1, retired, 'order-9'],
      ['orders', 1, held, 'order-9'],
    ]);

    expect(await killPendingMessages(db.pool, [retired!], { reason: '  topic retired  ' })).toEqual(
      [{ id: retired, topic: 'retired.topic', key: 'order-9' }],
    );
    expect((await rows([retired!]))[0]).toMatchObject({
      status: 'dead',
      last_error: 'killed by an operator: topic retired',
    });
    await drain(relay);
    expect(seen.get('order-9')).toEqual([2]);

    // Nothing of its key is pending now: the killed message can be sent again.
    expect(await retryDeadMessages(db.pool, [retired!])).toEqual([retired]);
    expect((await rows([retired!]))[0]?.status).toBe('pending');
    expect(await killPendingMessages(db.pool, [retired!])).toHaveLength(1);
    expect((await rows([retired!]))[0]?.last_error).toBe('killed by an operator');
    await relay.stop();
  });

  it('lets a key go on when its head waiting out a backoff is killed: the followers held behind it freed, the parked next one unparked', async () => {
    const topic = 'kill.heads';
    // Key `held` fails its first message: its window of followers is held to the head's due
    // time, an hour on. Key `parked` fails its 13th: by then the window was delivered, and the
    // followers of the head are all parked.
    const range = (n: number) => Array.from({ length: 20 }, (_, i) => i).slice(0, n);
    const ids = await publishMany(db.pool, [
      ...range(20).map((i) => ({ topic, key: 'held', payload: i })),
      ...range(20).map((i) => ({ topic, key: 'parked', payload: i })),
    ]);
    const heads = [ids[0]!, ids[20 + 12]!];
    const { sink, seen } = recordingSink((m) =>
      (m.key === 'held' && m.payload === 0) || (m.key === 'parked' && m.payload === 12)
        ? failed('receiver down')
        : { ok: true },
    );
    const relay = createRelay({
      pool: db.pool,
      sink,
      logger: silent,
      topics: [topic],
      backoff: anHour,
    });
    await drain(relay);
    expect(seen.get('held')).toBeUndefined();
    expect(seen.get('parked')).toEqual(range(12));
    const { rows: waiting } = await db.pool.query<{ key: string; parked: number; held: number }>(
      `SELECT key, count(*) FILTER (WHERE run_after = 'infinity')::int AS parked,
              count(*) FILTER (WHERE isfinite(run_after) AND run_after > now() + interval '50 minutes')::int AS held
       FROM skiplock.outbox_messages WHERE topic = $1 AND status = 'pending' GROUP BY key ORDER BY key`,
      [topic],
    );
    expect(waiting).toEqual([
      { key: 'held', parked: 19 - PARK_WINDOW, held: 1 + PARK_WINDOW },
      { key: 'parked', parked: 7, held: 1 },
    ]);

    const killed = await killPendingMessages(db.pool, heads, { reason: 'receiver gone' });
    expect(killed.map((k) => k.id)).toEqual(heads);
    await drain(relay);
    const without = (n: number) => range(20).filter((i) => i !== n);
    expect(seen.get('held')).toEqual(without(0));
    expect(seen.get('parked')).toEqual(without(12));
    await relay.stop();
  });

  it('leaves a message a relay holds, and kills one whose lease ran out, keeping its lease for a late delivered settle', async () => {
    const [leased, delivered, dead] = await publishMany(db.pool, [
      { topic: 'kill.lease', key: 'a', payload: 1 },
      { topic: 'kill.lease', key: 'b', payload: 2 },
      { topic: 'kill.lease', key: 'c', payload: 3 },
    ]);
    await db.pool.query(
      `UPDATE skiplock.outbox_messages SET attempts = 1, lease_id = gen_random_uuid(),
         lease_until = now() + interval '1 minute', locked_by = 'relay-1' WHERE id = $1`,
      [leased],
    );
    await db.pool.query(
      `UPDATE skiplock.outbox_messages SET status = 'delivered', settled_at = now() WHERE id = $1`,
      [delivered],
    );
    await db.pool.query(
      `UPDATE skiplock.outbox_messages SET status = 'dead', settled_at = now(), last_error = 'HTTP 400'
       WHERE id = $1`,
      [dead],
    );
    expect(await killPendingMessages(db.pool, [leased!, delivered!, dead!, '999999999'])).toEqual(
      [],
    );
    expect((await rows([leased!, delivered!, dead!])).map((r) => r.status)).toEqual([
      'pending',
      'delivered',
      'dead',
    ]);
    expect((await rows([dead!]))[0]?.last_error).toBe('HTTP 400');

    await db.pool.query(
      `UPDATE skiplock.outbox_messages SET lease_until = now() - interval '1 second' WHERE id = $1`,
      [leased],
    );
    const lease = (await rows([leased!]))[0]!.lease_id;
    expect(await killPendingMessages(db.pool, [leased!])).toEqual([
      { id: leased, topic: 'kill.lease', key: 'a' },
    ]);
    expect((await rows([leased!]))[0]).toMatchObject({
      status: 'dead',
      lease_id: lease,
      lease_until: null,
    });
  });

  it('refuses ids and reasons that are not, naming them', async () => {
    await expect(killPendingMessages(db.pool, [12 as never])).rejects.toThrow(
      'killPendingMessages: a message id must be a string, not the number 12',
    );
    for (const id of ['0', '007', '1; DROP TABLE x', '9223372036854775808']) {
      await expect(killPendingMessages(db.pool, [id])).rejects.toThrow(
        `killPendingMessages: "${id}" is not a message id`,
      );
    }
    await expect(
      killPendingMessages(
        db.pool,
        Array.from({ length: 1_001 }, (_, i) => String(i + 1)),
      ),
    ).rejects.toThrow('killPendingMessages: 1001 ids, more than 1000 per call');
    await expect(killPendingMessages(db.pool, ['1'], { reason: 'x'.repeat(501) })).rejects.toThrow(
      'killPendingMessages: reason must be a string of 500 characters at most',
    );
    expect(await killPendingMessages(db.pool, ['9223372036854775807'])).toEqual([]);
  });
});
