import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import {
  createRelay,
  deadMessages,
  failed,
  outboxCounts,
  publishMany,
  retryDeadMessages,
  type RelayOptions,
  type Sink,
} from '../src/index.js';
import { webhookSink } from '../src/sinks/webhook.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { secret, startReceiver, type Receiver } from './receiver.js';

const db = await useTestDatabase();
const silent = pino({ level: 'silent' });
const quickBackoff = { baseMs: 50, maxMs: 50, factor: 1, jitter: 0 };

function relayFor(receiver: Receiver, options: Partial<RelayOptions> = {}) {
  const sink = webhookSink({ url: receiver.url, secret, timeoutMs: 5_000 });
  return createRelay({ pool: db.pool, sink, logger: silent, backoff: quickBackoff, ...options });
}

/** Acknowledges every message without sending it anywhere. */
const okSink: Sink = {
  name: 'ok',
  deliver: async (messages) => messages.map(() => ({ ok: true as const })),
  close: async () => {},
};

/** Runs passes until one claims nothing that is due. */
async function drain(relay: ReturnType<typeof createRelay>, passes = 100) {
  for (let i = 0; i < passes; i++) {
    if ((await relay.runOnce()).claimed === 0) return;
  }
  throw new Error('relay still claiming after 100 passes');
}

async function statusOf(ids: string[]) {
  const { rows } = await db.pool.query<{
    id: string;
    status: string;
    attempts: number;
    last_error: string | null;
  }>(
    `SELECT id::text, status::text, attempts, last_error FROM skiplock.outbox_messages
     WHERE id = ANY($1::bigint[]) ORDER BY outbox_messages.id`,
    [ids],
  );
  return rows;
}

/** Each topic gets its own messages so that tests sharing the table do not see each other's. */
function only(receiver: Receiver, topic: string) {
  return receiver.accepted.filter((r) => r.type === topic);
}

/**
 * A relay of `topic` whose sink delivers to `receiver`, then, before the relay settles, makes the
 * message's lease run out (a long pause or a stalled settle, fast-forwarded in the database) and
 * runs `meanwhile`, whose answer `settle` returns.
 */
function relayPausedBeforeSettle(
  receiver: Receiver,
  id: string,
  topic: string,
  meanwhile: () => Promise<unknown>,
  options: Partial<RelayOptions> = {},
) {
  const inner = webhookSink({ url: receiver.url, secret });
  let answer: unknown = null;
  const pausing: Sink = {
    name: 'pausing',
    deliver: async (messages, signal) => {
      const result = await inner.deliver(messages, signal);
      await db.pool.query(
        `UPDATE skiplock.outbox_messages SET lease_until = now() - interval '1 second' WHERE id = $1`,
        [id],
      );
      answer = await meanwhile();
      return result;
    },
    close: () => inner.close(),
  };
  const relay = createRelay({
    pool: db.pool,
    sink: pausing,
    logger: silent,
    topics: [topic],
    ...options,
  });
  return { settle: () => relay.runOnce(), meanwhile: () => answer };
}

describe('relay', () => {
  it('delivers every message once, each key in publish order, and marks it delivered', async () => {
    const receiver = await startReceiver();
    const messages = Array.from({ length: 300 }, (_, i) => ({
      topic: 'order.test',
      key: i % 10 === 9 ? null : `k${i % 9}`,
      payload: { n: i },
    }));
    const ids = await publishMany(db.pool, messages);
    const relay = relayFor(receiver, { topics: ['order.test'] });
    const first = await relay.runOnce();
    // One claim takes the first message of each of the 9 keys and every unkeyed one (up to 100).
    expect(first).toMatchObject({ claimed: 9 + 30, delivered: 39, retried: 0, dead: 0, fenced: 0 });
    await drain(relay);
    const got = only(receiver, 'order.test');
    expect(got.every((r) => r.verified)).toBe(true);
    expect(got.map((r) => r.id).sort()).toEqual(ids.map((id) => `msg_${id}`).sort());
    for (let k = 0; k < 9; k++) {
      const sent = messages.filter((m) => m.key === `k${k}`).map((m) => m.payload.n);
      const seen = got
        .filter((r) => sent.includes((r.data as { n: number }).n))
        .map((r) => (r.data as { n: number }).n);
      expect(seen).toEqual(sent);
    }
    expect(new Set((await statusOf(ids)).map((r) => r.status))).toEqual(new Set(['delivered']));
  });

  it('holds back a failing message’s key only, and honours Retry-After', async () => {
    const receiver = await startReceiver();
    const [a1, a2, b1, b2] = await publishMany(db.pool, [
      { topic: 'hold.test', key: 'A', payload: 'a1' },
      { topic: 'hold.test', key: 'A', payload: 'a2' },
      { topic: 'hold.test', key: 'B', payload: 'b1' },
      { topic: 'hold.test', key: 'B', payload: 'b2' },
    ]);
    receiver.respond((request, nth) =>
      request.data === 'a1' && nth === 1
        ? { status: 500 }
        : request.data === 'a1' && nth === 2
          ? { status: 429, headers: { 'retry-after': '2' } }
          : { status: 200 },
    );
    // a1's backoff must outlast the two passes below that expect it not yet due (50 ms can pass
    // in them on a loaded machine), and stay under the 429's 2 s, so Retry-After still sets it.
    const relay = relayFor(receiver, {
      topics: ['hold.test'],
      backoff: { baseMs: 1_000, maxMs: 1_000, factor: 1, jitter: 0 },
    });
    expect(await relay.runOnce()).toMatchObject({ claimed: 2, delivered: 1, retried: 1 });
    // a1 waits out its backoff, and a2 is given a1's due time (claims stop before it); B goes on.
    const due = await db.pool.query<{ id: string; run_after: Date }>(
      `SELECT id::text, run_after FROM skiplock.outbox_messages WHERE id = ANY($1::bigint[]) ORDER BY outbox_messages.id`,
      [[a1, a2]],
    );
    expect(due.rows[1]?.run_after).toEqual(due.rows[0]?.run_after);
    expect(await relay.runOnce()).toMatchObject({ claimed: 1, delivered: 1 });
    expect((await relay.runOnce()).claimed).toBe(0);
    await waitFor(async () => ((await relay.runOnce()).claimed === 1 ? true : null));
    // The 429 asked for 2 s: the message is not due before then, whatever the backoff says.
    const [row] = (
      await db.pool.query<{ wait_ms: number }>(
        `SELECT extract(epoch FROM run_after - now()) * 1000 AS wait_ms FROM skiplock.outbox_messages WHERE id = $1`,
        [a1],
      )
    ).rows;
    expect(Number(row?.wait_ms)).toBeGreaterThan(1_500);
    expect((await relay.runOnce()).claimed).toBe(0);
    await waitFor(async () => ((await relay.runOnce()).delivered === 1 ? true : null), {
      timeoutMs: 10_000,
    });
    await drain(relay);
    expect(receiver.requests.filter((r) => r.type === 'hold.test').map((r) => r.data)).toEqual([
      'a1',
      'b1',
      'b2',
      'a1',
      'a1',
      'a2',
    ]);
    const rows = await statusOf([a1!, a2!, b1!, b2!]);
    expect(rows.map((r) => [r.status, r.attempts])).toEqual([
      ['delivered', 3],
      ['delivered', 1],
      ['delivered', 1],
      ['delivered', 1],
    ]);
  });

  it('sends a message dead on a permanent failure or its last attempt; its key goes on; an operator revives it', async () => {
    const receiver = await startReceiver();
    const logs = captureLogs();
    const [p1, p2, m1] = await publishMany(db.pool, [
      { topic: 'dead.test', key: 'P', payload: 'p1' },
      { topic: 'dead.test', key: 'P', payload: 'p2' },
      { topic: 'dead.test', key: 'M', payload: 'm1' },
    ]);
    let healed = false;
    receiver.respond((request) =>
      healed
        ? { status: 204 }
        : request.data === 'p1'
          ? { status: 400 }
          : request.data === 'm1'
            ? { status: 503 }
            : { status: 200 },
    );
    const relay = createRelay({
      pool: db.pool,
      sink: webhookSink({ url: receiver.url, secret }),
      logger: logs.logger,
      backoff: quickBackoff,
      maxAttempts: 2,
      topics: ['dead.test'],
    });
    expect(await relay.runOnce()).toMatchObject({ claimed: 2, dead: 1, retried: 1 });
    await waitFor(async () => ((await relay.runOnce()).dead === 1 ? true : null));
    await drain(relay);
    const rows = await statusOf([p1!, p2!, m1!]);
    expect(rows.map((r) => r.status)).toEqual(['dead', 'delivered', 'dead']);
    expect(rows[0]?.last_error).toContain('400');
    expect(rows[2]?.attempts).toBe(2);
    expect(logs.reasons()).toEqual(
      expect.arrayContaining(['outbox_dead_permanent', 'outbox_dead_attempts', 'outbox_retry']),
    );
    expect(JSON.stringify(logs.lines)).not.toContain('p1');

    const dead = await deadMessages(db.pool, { limit: 10 });
    expect(dead.filter((d) => d.topic === 'dead.test').map((d) => d.id)).toEqual([m1, p1]);
    healed = true;
    expect(await retryDeadMessages(db.pool, [p1!, m1!, p2!])).toEqual(
      expect.arrayContaining([p1, m1]),
    );
    await drain(relay);
    expect((await statusOf([p1!, m1!])).map((r) => [r.status, r.attempts])).toEqual([
      ['delivered', 1],
      ['delivered', 1],
    ]);
    await expect(retryDeadMessages(db.pool, ['1; DROP TABLE x'])).rejects.toThrow(
      'is not a message id',
    );
  });

  it('fences the settle: a relay whose lease ran out changes nothing another relay delivered', async () => {
    const receiver = await startReceiver();
    const [id] = await publishMany(db.pool, [{ topic: 'fence.test', key: 'F', payload: 'f' }]);
    const other = relayFor(receiver, { topics: ['fence.test'] });
    // Delivers; then, before this relay settles, its lease runs out and another relay takes the
    // message over and delivers it again.
    const slow = relayPausedBeforeSettle(receiver, id!, 'fence.test', () => other.runOnce());
    expect(await slow.settle()).toMatchObject({ claimed: 1, delivered: 1, fenced: 1 });
    expect(slow.meanwhile()).toMatchObject({ claimed: 1, delivered: 1, fenced: 0 });
    // Delivered twice with one id: a receiver (or JetStream) de-duplicates on it.
    expect(receiver.requests.map((r) => r.id)).toEqual([`msg_${id}`, `msg_${id}`]);
    expect((await statusOf([id!]))[0]).toMatchObject({ status: 'delivered', attempts: 2 });
  });

  it('tries a failed settle again: a delivered message on its last attempt is marked delivered, not left leased', async () => {
    const [id] = await publishMany(db.pool, [{ topic: 'resettle.test', key: 'R', payload: 'r' }]);
    const holder = await db.pool.connect();
    // Delivers, then holds the message's row, so that the relay's settle waits for it there.
    const holding: Sink = {
      name: 'holding',
      deliver: async (messages) => {
        await holder.query('BEGIN');
        await holder.query('SELECT 1 FROM skiplock.outbox_messages WHERE id = $1 FOR UPDATE', [id]);
        return messages.map(() => ({ ok: true as const }));
      },
      close: async () => {},
    };
    const logs = captureLogs();
    const relay = createRelay({
      pool: db.newPool(2),
      sink: holding,
      logger: logs.logger,
      topics: ['resettle.test'],
      maxAttempts: 1,
    });
    try {
      const pass = relay.runOnce();
      // The settle's connection ends under it (a failover, a reset): a real failed write.
      await waitFor(
        async () =>
          (
            await db.pool.query(
              `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
               WHERE wait_event_type = 'Lock' AND query LIKE '%outbox_messages%'
                 AND datname = current_database() AND pid <> pg_backend_pid()`,
            )
          ).rowCount === 1 || null,
        { what: 'the settle to wait for the row, and its connection to end' },
      );
      await holder.query('COMMIT');
      // Before: the pass failed with the connection, and the message stayed leased until
      // maintenance sent it dead as never settled, though its broker had it.
      expect(await pass).toMatchObject({ claimed: 1, delivered: 1, fenced: 0 });
      expect((await statusOf([id!]))[0]).toMatchObject({ status: 'delivered', attempts: 1 });
      expect(logs.lines.find((l) => l.reason === 'outbox_settle_retry')).toMatchObject({
        count: 1,
        failures: 1,
      });
    } finally {
      holder.release();
      await relay.stop();
    }
  });

  it("times the sink's deadline from the claim's start: a slow claim leaves the sink less time", async () => {
    const [id] = await publishMany(db.pool, [{ topic: 'slow-claim.test', payload: 's' }]);
    // A pool whose answers to claims come late (a lagging synchronous standby, say): after the
    // server has given them, 1.5 s of the relay's 2 s lease.
    const pool = db.newPool(2);
    const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
    (pool as unknown as { query: typeof query }).query = async (...args: unknown[]) => {
      const first = args[0];
      const text = typeof first === 'string' ? first : (first as { text: string }).text;
      const answer = await query(...args);
      if (text.includes('WITH picked AS')) await new Promise((r) => setTimeout(r, 1_500));
      return answer;
    };
    let abortedEarly: boolean | null = null;
    const heeding: Sink = {
      name: 'heeding',
      deliver: async (messages, signal) => {
        // Half the lease from the claim's start has passed already: the signal fires at once.
        await new Promise((r) => setTimeout(r, 100));
        abortedEarly = signal.aborted;
        return messages.map(() =>
          signal.aborted
            ? { ok: false as const, error: 'deadline', notSent: true }
            : { ok: true as const },
        );
      },
      close: async () => {},
    };
    const relay = createRelay({
      pool,
      sink: heeding,
      logger: silent,
      leaseMs: 2_000,
      topics: ['slow-claim.test'],
    });
    // Before: half the lease from the claim's answer, so the sink had a whole second more, and its
    // settle could come after the lease ran out.
    expect(await relay.runOnce()).toMatchObject({ claimed: 1, delivered: 0, retried: 1 });
    expect(abortedEarly).toBe(true);
    // Never sent: its attempt is given back.
    expect((await statusOf([id!]))[0]).toMatchObject({ status: 'pending', attempts: 0 });
    await relay.stop();
  });

  it('lets a late settle of a last attempt land after maintenance sent the message dead', async () => {
    const receiver = await startReceiver();
    const [id] = await publishMany(db.pool, [{ topic: 'late.test', key: 'Z', payload: 'z' }]);
    const expirer = relayFor(receiver, { topics: ['late.test'], maxAttempts: 1 });
    // Delivers on its only attempt; then, before this relay settles, its lease runs out and
    // maintenance sends the message dead.
    const slow = relayPausedBeforeSettle(
      receiver,
      id!,
      'late.test',
      async () => {
        const expired = await expirer.retainOnce();
        expect((await statusOf([id!]))[0]).toMatchObject({ status: 'dead' });
        return expired;
      },
      { maxAttempts: 1 },
    );
    expect(await slow.settle()).toMatchObject({ claimed: 1, delivered: 1, fenced: 0 });
    expect(slow.meanwhile()).toMatchObject({ expired: 1 });
    expect(receiver.requests.map((r) => r.id)).toEqual([`msg_${id}`]);
    expect((await statusOf([id!]))[0]).toEqual({
      id,
      status: 'delivered',
      attempts: 1,
      last_error: null,
    });
    // A revive starts from no lease: the expired attempt's settle no longer applies to it.
    await db.pool.query(
      `UPDATE skiplock.outbox_messages SET status = 'dead', lease_id = gen_random_uuid() WHERE id = $1`,
      [id],
    );
    expect(await retryDeadMessages(db.pool, [id!])).toEqual([id]);
    const { rows } = await db.pool.query(
      `SELECT lease_id FROM skiplock.outbox_messages WHERE id = $1`,
      [id],
    );
    expect(rows).toEqual([{ lease_id: null }]);
    await db.pool.query(`DELETE FROM skiplock.outbox_messages WHERE id = $1`, [id]);
  });

  it('fences a late settle that did not deliver: a message maintenance sent dead stays dead', async () => {
    for (const [n, outcome] of [
      failed('not sent: the relay gave up on the batch first', { notSent: true }),
      failed('HTTP 503'),
      failed('HTTP 410', { permanent: true }),
    ].entries()) {
      const topic = `late-failed.test.${n}`;
      const [first, second] = await publishMany(db.pool, [
        { topic, key: 'L', payload: 1 },
        { topic, key: 'L', payload: 2 },
      ]);
      const options = { pool: db.pool, logger: silent, topics: [topic], maxAttempts: 1 };
      const other = createRelay({ ...options, sink: okSink });
      let meanwhile: unknown;
      // Its lease runs out before it settles (fast-forwarded), maintenance sends the first message
      // dead, and that frees the key's second for another relay.
      const sink: Sink = {
        name: 'late',
        deliver: async (messages) => {
          await db.pool.query(
            `UPDATE skiplock.outbox_messages SET lease_until = now() - interval '1 second' WHERE id = $1`,
            [first],
          );
          meanwhile = await other.retainOnce();
          return messages.map(() => outcome);
        },
        close: async () => {},
      };
      const late = createRelay({ ...options, sink });
      expect(await late.runOnce()).toMatchObject({ claimed: 1, fenced: 1 });
      expect(meanwhile).toMatchObject({ expired: 1 });
      // Back to pending, the first would be its key's head again beside the second in flight.
      expect((await statusOf([first!]))[0]).toMatchObject({
        status: 'dead',
        last_error: expect.stringContaining('lease ran out'),
      });
      expect(await other.runOnce()).toMatchObject({ claimed: 1, delivered: 1 });
      expect((await statusOf([first!, second!])).map((r) => r.status)).toEqual([
        'dead',
        'delivered',
      ]);
    }
  });

  it('keeps delivered messages for retainDeliveredMs, then deletes them in bounded passes', async () => {
    const receiver = await startReceiver();
    const ids = await publishMany(
      db.pool,
      Array.from({ length: 20 }, (_, i) => ({ topic: 'retain.test', payload: i })),
    );
    const relay = relayFor(receiver, { topics: ['retain.test'], retainDeliveredMs: 3_600_000 });
    await drain(relay);
    await db.pool.query(
      `UPDATE skiplock.outbox_messages SET settled_at = now() - interval '2 hours' WHERE id = ANY($1::bigint[]) AND id <= $2`,
      [ids, ids[9]],
    );
    const before = await outboxCounts(db.pool);
    expect(await relay.retainOnce()).toEqual({ deleted: 10, expired: 0, unstalled: 0 });
    expect((await statusOf(ids)).map((r) => r.id)).toEqual(ids.slice(10));
    expect((await outboxCounts(db.pool)).delivered).toBe(before.delivered - 10);
  });

  it('wakes on NOTIFY without waiting for its poll, and a stop waits for the batch in flight', async () => {
    const receiver = await startReceiver();
    receiver.respond(() => ({ status: 200, delayMs: 400 }));
    const relay = relayFor(receiver, { topics: ['live.test'], pollIntervalMs: 600_000 });
    relay.start();
    try {
      // The first pass at start finds nothing; only the notification can bring the next.
      await new Promise((r) => setTimeout(r, 300));
      const [id] = await publishMany(db.pool, [{ topic: 'live.test', key: 'L', payload: 1 }]);
      await waitFor(() => (receiver.requests.length === 1 ? true : null), { timeoutMs: 10_000 });
      await relay.stop();
      expect((await statusOf([id!]))[0]?.status).toBe('delivered');
    } finally {
      await relay.stop();
    }
  });

  it('fails a whole batch when the sink throws, and retries it', async () => {
    const [id] = await publishMany(db.pool, [{ topic: 'throw.test', payload: 1 }]);
    let calls = 0;
    const throwing: Sink = {
      name: 'throwing',
      deliver: async (messages) => {
        calls += 1;
        if (calls === 1) throw new Error('broker unreachable');
        return messages.map(() => ({ ok: true as const }));
      },
      close: async () => {},
    };
    const relay = createRelay({
      pool: db.pool,
      sink: throwing,
      logger: silent,
      backoff: quickBackoff,
      topics: ['throw.test'],
    });
    expect(await relay.runOnce()).toMatchObject({ claimed: 1, retried: 1 });
    expect((await statusOf([id!]))[0]?.last_error).toBe('broker unreachable');
    await waitFor(async () => ((await relay.runOnce()).delivered === 1 ? true : null));
  });

  it('keeps a key in commit order when its publishers overlap: the later publisher waits', async () => {
    const receiver = await startReceiver();
    const first = await db.pool.connect();
    const second = await db.pool.connect();
    try {
      await first.query('BEGIN');
      const early = await publishMany(first, [
        { topic: 'overlap.test', key: 'O', payload: 'first' },
      ]);
      await second.query('BEGIN');
      let late: string[] | null = null;
      const latePublish = publishMany(second, [
        { topic: 'overlap.test', key: 'O', payload: 'second' },
        { topic: 'overlap.test', key: 'other', payload: 'free' },
      ]).then((ids) => (late = ids));
      // The second publisher waits on the key's lock until the first commits.
      await new Promise((r) => setTimeout(r, 300));
      expect(late).toBeNull();
      await first.query('COMMIT');
      await latePublish;
      await second.query('COMMIT');
      expect(BigInt(late![0]!)).toBeGreaterThan(BigInt(early[0]!));
    } finally {
      first.release();
      second.release();
    }
    const relay = relayFor(receiver, { topics: ['overlap.test'] });
    await drain(relay);
    expect(only(receiver, 'overlap.test').map((r) => r.data)).toEqual(['first', 'free', 'second']);
  });

  it('revives a dead message only when its key has nothing in flight', async () => {
    const receiver = await startReceiver();
    const [d1, d2] = await publishMany(db.pool, [
      { topic: 'revive.test', key: 'R', payload: 'd1' },
      { topic: 'revive.test', key: 'R', payload: 'd2' },
    ]);
    receiver.respond((request) =>
      request.data === 'd1' ? { status: 400 } : { status: 200, delayMs: 800 },
    );
    const relay = relayFor(receiver, { topics: ['revive.test'] });
    expect(await relay.runOnce()).toMatchObject({ dead: 1 });
    // d2 is in flight (its receiver answers late): reviving d1 now would put two of R in flight.
    const inFlight = relay.runOnce();
    await waitFor(() => (receiver.requests.some((r) => r.data === 'd2') ? true : null));
    expect(await retryDeadMessages(db.pool, [d1!])).toEqual([]);
    expect(await inFlight).toMatchObject({ delivered: 1 });
    expect(await retryDeadMessages(db.pool, [d1!])).toEqual([d1]);
    receiver.respond(() => ({ status: 200 }));
    await drain(relay);
    expect((await statusOf([d1!, d2!])).map((r) => r.status)).toEqual(['delivered', 'delivered']);
  });

  it('keeps a dead message dead while its key has a pending message or a publisher in a transaction', async () => {
    const [d1, d2] = await publishMany(db.pool, [
      { topic: 'revive-pending.test', key: 'RP', payload: 'd1' },
      { topic: 'revive-pending.test', key: 'RP', payload: 'd2' },
    ]);
    await db.pool.query(
      `UPDATE skiplock.outbox_messages SET status = 'dead', settled_at = now(), attempts = 1
       WHERE id = $1`,
      [d1],
    );
    // d2 is pending, not in flight: a claim that began before a revive would still see d1 dead
    // and take d2 as the first of its key, beside the revived d1.
    expect(await retryDeadMessages(db.pool, [d1!])).toEqual([]);
    const sink: Sink = {
      name: 'ok',
      deliver: async (m) => m.map(() => ({ ok: true as const })),
      close: async () => {},
    };
    const relay = createRelay({
      pool: db.pool,
      sink,
      logger: silent,
      topics: ['revive-pending.test'],
    });
    expect(await relay.runOnce()).toMatchObject({ claimed: 1, delivered: 1 });
    // A publisher of the key in an open transaction: the revive does not wait for it (it could
    // stall other keys' publishers behind it) and leaves d1 dead; once it commits, its message
    // is pending, and d1 stays dead again.
    const publisher = await db.pool.connect();
    try {
      await publisher.query('BEGIN');
      const [d3] = await publishMany(publisher, [
        { topic: 'revive-pending.test', key: 'RP', payload: 'd3' },
      ]);
      expect(await retryDeadMessages(db.pool, [d1!])).toEqual([]);
      await publisher.query('COMMIT');
      expect(await retryDeadMessages(db.pool, [d1!])).toEqual([]);
      expect(await relay.runOnce()).toMatchObject({ claimed: 1, delivered: 1 });
      expect(await statusOf([d2!, d3!])).toMatchObject([
        { status: 'delivered' },
        { status: 'delivered' },
      ]);
    } finally {
      await publisher.query('ROLLBACK').catch(() => {});
      publisher.release();
    }
    // The key has nothing pending now: d1 is revived, and it is the key's next message.
    expect(await retryDeadMessages(db.pool, [d1!])).toEqual([d1]);
    expect(await relay.runOnce()).toMatchObject({ claimed: 1, delivered: 1 });
    expect((await statusOf([d1!]))[0]).toMatchObject({ status: 'delivered', attempts: 1 });
  });

  it('settles whatever delay a sink asks for, and gives back the attempt of a message never sent', async () => {
    const [odd, unsent] = await publishMany(db.pool, [
      { topic: 'odd.test', payload: 1 },
      { topic: 'odd.test', payload: 2 },
    ]);
    const sink: Sink = {
      name: 'odd',
      deliver: async (messages) =>
        messages.map((m) =>
          m.id === odd
            ? { ok: false, error: 'busy', retryAfterMs: 1500.5 }
            : { ok: false, error: 'not sent', notSent: true },
        ),
      close: async () => {},
    };
    const relay = createRelay({
      pool: db.pool,
      sink,
      logger: silent,
      backoff: quickBackoff,
      topics: ['odd.test'],
    });
    expect(await relay.runOnce()).toMatchObject({ claimed: 2, retried: 2 });
    const { rows } = await db.pool.query<{ id: string; attempts: number; wait_ms: number }>(
      `SELECT id::text, attempts, extract(epoch FROM run_after - now()) * 1000 AS wait_ms
       FROM skiplock.outbox_messages WHERE id = ANY($1::bigint[]) ORDER BY outbox_messages.id`,
      [[odd, unsent]],
    );
    expect(rows[0]).toMatchObject({ attempts: 1 });
    expect(Number(rows[0]?.wait_ms)).toBeGreaterThan(1_000);
    expect(rows[1]).toMatchObject({ attempts: 0 });
    expect(Number(rows[1]?.wait_ms)).toBeLessThanOrEqual(0);
  });

  it("keeps a failure's text with a NUL in it (a receiver's body), the NUL replaced", async () => {
    const [bin, unsent] = await publishMany(db.pool, [
      { topic: 'nul.test', payload: 1 },
      { topic: 'nul.test', payload: 2 },
    ]);
    const sink: Sink = {
      name: 'nul',
      deliver: async (messages) =>
        messages.map((m) =>
          m.id === bin
            ? { ok: false, error: 'HTTP 500\u0000', detail: 'GIF89a\u0000\u0001' }
            : { ok: false, error: 'not\u0000sent', notSent: true },
        ),
      close: async () => {},
    };
    const relay = createRelay({
      pool: db.pool,
      sink,
      logger: silent,
      backoff: quickBackoff,
      topics: ['nul.test'],
    });
    // Before: the settle's text[] failed (invalid byte sequence 0x00), so the whole batch stayed
    // leased until its lease ran out, and the receiver's answer was lost.
    expect(await relay.runOnce()).toMatchObject({ claimed: 2, retried: 2 });
    expect(await statusOf([bin!, unsent!])).toEqual([
      { id: bin, status: 'pending', attempts: 1, last_error: 'HTTP 500\ufffd: GIF89a\ufffd\u0001' },
      { id: unsent, status: 'pending', attempts: 0, last_error: 'not\ufffdsent' },
    ]);
  });

  it('gives back the attempt of messages a sink reports unsent when the batch deadline aborts it', async () => {
    const [id] = await publishMany(db.pool, [{ topic: 'abort.test', key: 'U', payload: 1 }]);
    // As the RabbitMQ and webhook sinks do: on abort, answer at once, nothing published.
    const sink: Sink = {
      name: 'abortable',
      deliver: (messages, signal) =>
        new Promise((resolve) => {
          signal.addEventListener('abort', () =>
            resolve(messages.map(() => ({ ok: false, error: 'aborted', notSent: true }))),
          );
        }),
      close: async () => {},
    };
    // The deadline is half the lease (1 s); with maxAttempts 1 a counted attempt is dead.
    const relay = createRelay({
      pool: db.pool,
      sink,
      logger: silent,
      leaseMs: 2_000,
      maxAttempts: 1,
      backoff: quickBackoff,
      topics: ['abort.test'],
    });
    expect(await relay.runOnce()).toMatchObject({ claimed: 1, retried: 1, dead: 0 });
    expect(await statusOf([id!])).toMatchObject([{ status: 'pending', attempts: 0 }]);
  });

  it('keeps the attempts of webhook messages never sent before the deadline', async () => {
    const receiver = await startReceiver();
    receiver.respond(() => ({ status: 200, delayMs: 5_000 }));
    const ids = await publishMany(db.pool, [
      { topic: 'slowhook.test', payload: 1 },
      { topic: 'slowhook.test', payload: 2 },
      { topic: 'slowhook.test', payload: 3 },
    ]);
    // One request at a time: the 1.5 s deadline passes during the first; 2 and 3 never go.
    const relay = createRelay({
      pool: db.pool,
      sink: webhookSink({ url: receiver.url, secret, concurrency: 1 }),
      logger: silent,
      leaseMs: 3_000,
      maxAttempts: 1,
      topics: ['slowhook.test'],
    });
    expect(await relay.runOnce()).toMatchObject({ claimed: 3 });
    expect(receiver.requests).toHaveLength(1);
    const rows = await statusOf(ids);
    expect(rows[0]).toMatchObject({ status: 'dead', attempts: 1 });
    expect(rows.slice(1)).toMatchObject([
      { status: 'pending', attempts: 0 },
      { status: 'pending', attempts: 0 },
    ]);
  });

  it('stops within its timeout even when the sink ignores its signal and never returns', async () => {
    await publishMany(db.pool, [{ topic: 'hang.test', key: 'H', payload: 1 }]);
    let called = false;
    const hanging: Sink = {
      name: 'hanging',
      deliver: () => {
        called = true;
        return new Promise(() => {});
      },
      close: async () => {},
    };
    const relay = createRelay({
      pool: db.pool,
      sink: hanging,
      logger: silent,
      topics: ['hang.test'],
    });
    relay.start();
    await waitFor(() => (called ? true : null));
    // No duration: refused by name, the relay still running (before: Infinity became Node's
    // 1 ms timer and the deliveries were aborted at once).
    for (const timeoutMs of [Number.POSITIVE_INFINITY, -1, 0.5]) {
      await expect(relay.stop({ timeoutMs })).rejects.toThrow(
        `relay.stop: timeoutMs must be an integer from 0 to 3600000, got ${timeoutMs}`,
      );
    }
    const started = Date.now();
    await relay.stop({ timeoutMs: 300 });
    expect(Date.now() - started).toBeLessThan(5_000);
    const { rows } = await db.pool.query<{ status: string; leased: boolean; last_error: string }>(
      `SELECT status::text, lease_id IS NOT NULL AS leased, last_error FROM skiplock.outbox_messages WHERE topic = 'hang.test'`,
    );
    expect(rows).toEqual([
      {
        status: 'pending',
        leased: false,
        last_error: 'sink hanging did not return by the batch deadline',
      },
    ]);
  });

  it('sends to dead a message whose last attempt died with its relay', async () => {
    const logs = captureLogs();
    const [id] = await publishMany(db.pool, [{ topic: 'crashy.test', key: 'C', payload: 1 }]);
    // As a relay leaves it when the message kills it on its last attempt: leased, lease run out.
    await db.pool.query(
      `UPDATE skiplock.outbox_messages SET attempts = 3, lease_id = gen_random_uuid(),
         lease_until = now() - interval '1 second' WHERE id = $1`,
      [id],
    );
    const sink: Sink = {
      name: 'unused',
      deliver: async (m) => m.map(() => ({ ok: true as const })),
      close: async () => {},
    };
    const relay = createRelay({
      pool: db.pool,
      sink,
      logger: logs.logger,
      maxAttempts: 3,
      topics: ['crashy.test'],
    });
    expect((await relay.runOnce()).claimed).toBe(0);
    expect((await relay.retainOnce()).expired).toBe(1);
    expect((await statusOf([id!]))[0]).toMatchObject({
      status: 'dead',
      last_error: expect.stringContaining('lease ran out'),
    });
    expect(logs.reasons()).toContain('outbox_dead_lease');
  });

  it('sends dead a message out of attempts under a lowered maxAttempts, and its key goes on', async () => {
    const logs = captureLogs();
    const [a1, a2] = await publishMany(db.pool, [
      { topic: 'lowered.test', key: 'L', payload: 'a1' },
      { topic: 'lowered.test', key: 'L', payload: 'a2' },
    ]);
    let failing = true;
    const sink: Sink = {
      name: 'flaky',
      deliver: async (messages) =>
        messages.map(() => (failing ? { ok: false, error: 'down' } : { ok: true as const })),
      close: async () => {},
    };
    // Deployed with maxAttempts 10 first: a1 fails 3 times and waits for its 4th.
    const before = createRelay({
      pool: db.pool,
      sink,
      logger: silent,
      maxAttempts: 10,
      backoff: { baseMs: 0, maxMs: 0, factor: 1, jitter: 0 },
      topics: ['lowered.test'],
    });
    for (let i = 0; i < 3; i++) expect(await before.runOnce()).toMatchObject({ claimed: 1 });
    failing = false;
    // Then with maxAttempts 3: no claim takes a1 again, so maintenance sends it dead.
    const after = createRelay({
      pool: db.pool,
      sink,
      logger: logs.logger,
      maxAttempts: 3,
      topics: ['lowered.test'],
    });
    expect(await after.retainOnce()).toMatchObject({ expired: 1 });
    expect((await statusOf([a1!]))[0]).toMatchObject({
      status: 'dead',
      attempts: 3,
      last_error: 'out of attempts: 3 started, maxAttempts 3; last error: down',
    });
    expect(logs.reasons()).toContain('outbox_dead_attempts');
    expect(await after.runOnce()).toMatchObject({ claimed: 1, delivered: 1 });
    expect((await statusOf([a2!]))[0]?.status).toBe('delivered');
  });

  it('lets the key go on at once when maintenance sends dead a head that waited out a long backoff', async () => {
    const [b1, b2] = await publishMany(db.pool, [
      { topic: 'held.test', key: 'held', payload: 'b1' },
      { topic: 'held.test', key: 'held', payload: 'b2' },
    ]);
    const busy: Sink = {
      name: 'busy',
      deliver: async (messages) =>
        messages.map(() => ({ ok: false, error: 'HTTP 503', retryAfterMs: 3_600_000 })),
      close: async () => {},
    };
    const ok: Sink = {
      name: 'ok',
      deliver: async (messages) => messages.map(() => ({ ok: true as const })),
      close: async () => {},
    };
    // b1 is told to come back in an hour, and b2 behind it is pushed to the same time.
    const before = createRelay({
      pool: db.pool,
      sink: busy,
      logger: silent,
      topics: ['held.test'],
    });
    expect(await before.runOnce()).toMatchObject({ claimed: 1, retried: 1 });
    // Redeployed with maxAttempts 1: maintenance sends b1 dead.
    const after = createRelay({
      pool: db.pool,
      sink: ok,
      logger: silent,
      maxAttempts: 1,
      topics: ['held.test'],
    });
    expect(await after.retainOnce()).toMatchObject({ expired: 1 });
    // Before (found by an audit): b2 kept b1's due time and waited the hour.
    expect(await after.runOnce()).toMatchObject({ claimed: 1, delivered: 1 });
    expect((await statusOf([b1!, b2!])).map((m) => m.status)).toEqual(['dead', 'delivered']);
  });

  it("leaves other topics' messages out of attempts to their own relays", async () => {
    const [leased] = await publishMany(db.pool, [{ topic: 'theirs.test', key: 'T', payload: 1 }]);
    // A relay of theirs.test (maxAttempts 10) died on its 3rd attempt.
    await db.pool.query(
      `UPDATE skiplock.outbox_messages SET attempts = 3, lease_id = gen_random_uuid(),
         lease_until = now() - interval '1 second' WHERE id = $1`,
      [leased],
    );
    const sink: Sink = {
      name: 'unused',
      deliver: async (m) => m.map(() => ({ ok: true as const })),
      close: async () => {},
    };
    const mine = createRelay({
      pool: db.pool,
      sink,
      logger: silent,
      maxAttempts: 3,
      topics: ['mine.test'],
    });
    expect(await mine.retainOnce()).toMatchObject({ expired: 0 });
    expect(await statusOf([leased!])).toMatchObject([{ status: 'pending', attempts: 3 }]);
  });

  it('refuses bad options by name', () => {
    const sink: Sink = { name: 'none', deliver: async () => [], close: async () => {} };
    expect(() => createRelay({ pool: db.pool, sink, batchSize: 0 })).toThrow(
      'createRelay: batchSize must be an integer from 1 to 10000, got 0',
    );
    expect(() => createRelay({ pool: db.pool, sink, leaseMs: 1.5 })).toThrow('leaseMs');
    expect(() => createRelay({ pool: db.pool, sink, topics: [] })).toThrow(
      'topics must be a non-empty list',
    );
    expect(() =>
      createRelay({ pool: db.pool, sink, backoff: { baseMs: 10, maxMs: 5, factor: 2, jitter: 0 } }),
    ).toThrow('backoff.maxMs');
    expect(() => createRelay({ pool: db.pool, sink, retentionIntervalMs: 0 })).toThrow(
      'retentionIntervalMs',
    );
  });

  it('refuses a sink that cannot deliver', () => {
    // Before: accepted; each batch failed on "sink.deliver is not a function" and spent an
    // attempt of every message, until they went dead.
    for (const sink of [{}, { name: 'x' }, { deliver: async () => [] }, null, undefined, 'nats']) {
      expect(() => createRelay({ pool: db.pool, sink: sink as never })).toThrow(
        'createRelay: sink must be a sink object with a name and deliver(messages, signal)',
      );
    }
  });
});
