import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createRelay,
  DEFAULT_MAX_PAYLOAD_BYTES,
  outboxCounts,
  publish,
  publishMany,
  type Relay,
  type Sink,
} from '../src/index.js';
import { ensureStream, natsSink, type NatsSink } from '../src/sinks/nats.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { brokerAvailable, natsUrl } from './brokers.js';
import { readStream, streamNames } from './jetstream.js';
import { findNatsServer, startNatsServer } from './nats-server.js';

const available = await brokerAvailable('NATS', natsUrl, 4222);
const natsServer = findNatsServer();
const db = await useTestDatabase();
const silent = pino({ level: 'silent' });

const closers: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const close of closers.reverse()) await close().catch(() => {});
});

/** Per key, the payload numbers in the order the stream holds them. */
function orderByKey(messages: { key: string | null; n: number }[]) {
  const byKey = new Map<string, number[]>();
  for (const m of messages) {
    const list = byKey.get(m.key ?? '') ?? [];
    list.push(m.n);
    byKey.set(m.key ?? '', list);
  }
  return byKey;
}

async function streamMessages(nc: NatsConnection, stream: string) {
  return (await readStream(nc, stream)).map((m) => ({
    msgId: m.headers?.get('Nats-Msg-Id') ?? '',
    key: m.headers?.get('skiplock-key') || null,
    n: (m.json() as { n: number }).n,
  }));
}

describe.skipIf(!available)('relay to NATS JetStream', () => {
  it('delivers the largest message publish accepts by default: a full payload, 8 KiB of headers, the longest key', async () => {
    const { stream, prefix } = streamNames();
    const nc = await connect({ servers: natsUrl });
    closers.push(() => nc.close());
    await ensureStream({ connection: nc, name: stream, subjects: [`${prefix}.>`] });
    closers.push(async () => (await jetstreamManager(nc)).streams.delete(stream));
    const topic = `${prefix}.big`;
    // 255 characters of 3 bytes each, and two headers of 4,096 bytes (name and value).
    const key = '€'.repeat(255);
    const headers = { a: 'h'.repeat(4_095), b: 'h'.repeat(4_095) };
    // A JSON string is its characters and two quotes: payload and headers at the limit exactly.
    const payload = 'x'.repeat(DEFAULT_MAX_PAYLOAD_BYTES - 8_192 - 2);
    const id = await publish(db.pool, { topic, key, headers, payload });
    // A byte more is refused at publish (before: published, then dead at delivery, since NATS
    // counts headers in its max_payload; found by an audit).
    await expect(publish(db.pool, { topic, key, headers, payload: `${payload}x` })).rejects.toThrow(
      /is \d+ bytes as JSON and the headers 8192, over maxPayloadBytes/,
    );
    const sink = natsSink({ servers: natsUrl });
    closers.push(() => sink.close());
    const relay = createRelay({ pool: db.pool, sink, logger: silent, topics: [topic] });
    expect(await relay.runOnce()).toMatchObject({ claimed: 1, delivered: 1 });
    await relay.stop();
    const { rows } = await db.pool.query(
      'SELECT status::text FROM skiplock.outbox_messages WHERE id = $1',
      [id],
    );
    expect(rows[0]).toEqual({ status: 'delivered' });
  });

  it('keeps each key in publish order with 4 relays side by side, each message once in the stream', async () => {
    const { stream, prefix } = streamNames();
    const nc = await connect({ servers: natsUrl });
    closers.push(() => nc.close());
    await ensureStream({ connection: nc, name: stream, subjects: [`${prefix}.>`] });
    closers.push(async () => (await jetstreamManager(nc)).streams.delete(stream));
    const topic = `${prefix}.ordered`;
    const total = 2_000;
    const relays: Relay[] = [];
    const sinks: NatsSink[] = [];
    const handed = [0, 0, 0, 0];
    for (let i = 0; i < 4; i++) {
      const nats = natsSink({ servers: natsUrl, msgIdPrefix: `${prefix}-` });
      sinks.push(nats);
      // Counts what each relay handed to its sink.
      const sink: Sink = {
        name: nats.name,
        deliver: (messages, signal) => {
          handed[i]! += messages.length;
          return nats.deliver(messages, signal);
        },
        close: () => nats.close(),
      };
      // Each relay with its own pool: four separate sets of connections claiming at once.
      const relay = createRelay({
        pool: db.newPool(4),
        sink,
        topics: [topic],
        batchSize: 50,
        logger: silent,
        name: `relay-${i}`,
      });
      relays.push(relay);
      relay.start();
    }
    closers.push(async () => {
      await Promise.all(relays.map((r) => r.stop()));
      await Promise.all(sinks.map((s) => s.close()));
    });
    // Published while the relays run, in 20 transactions, over 40 keys and some unkeyed.
    const published: { key: string | null; n: number }[] = [];
    for (let t = 0; t < 20; t++) {
      const batch = Array.from({ length: total / 20 }, (_, i) => {
        const n = t * (total / 20) + i;
        return { key: n % 11 === 0 ? null : `key-${n % 40}`, n };
      });
      await publishMany(
        db.pool,
        batch.map((m) => ({ topic, key: m.key, payload: { n: m.n } })),
      );
      published.push(...batch);
    }
    await waitFor(
      async () => {
        const { rows } = await db.pool.query<{ left: number }>(
          `SELECT count(*)::int AS left FROM skiplock.outbox_messages WHERE topic = $1 AND status <> 'delivered'`,
          [topic],
        );
        return rows[0]?.left === 0;
      },
      { timeoutMs: 60_000, what: 'every message delivered' },
    );
    const seen = await streamMessages(nc, stream);
    expect(seen).toHaveLength(total);
    expect(new Set(seen.map((m) => m.msgId)).size).toBe(total);
    const want = orderByKey(published.filter((m) => m.key !== null));
    const got = orderByKey(seen.filter((m) => m.key !== null));
    expect(got).toEqual(want);
    // Every relay took part.
    expect(handed.every((n) => n > 0)).toBe(true);
  });

  it.skipIf(!natsServer && !process.env.CI)(
    'rides out a broker restart: the relay reconnects and loses nothing',
    async () => {
      const server = await startNatsServer(natsServer!);
      closers.push(() => server.dispose());
      const { stream, prefix } = streamNames();
      await ensureStream({ servers: server.url, name: stream, subjects: [`${prefix}.>`] });
      const topic = `${prefix}.restart`;
      const sink = natsSink({ servers: server.url, ackTimeoutMs: 1_000 });
      const relay = createRelay({
        pool: db.pool,
        sink,
        topics: [topic],
        batchSize: 20,
        logger: silent,
        backoff: { baseMs: 200, maxMs: 1_000, factor: 2, jitter: 0.2 },
        maxAttempts: 1_000,
      });
      relay.start();
      closers.push(async () => {
        await relay.stop();
        await sink.close();
      });
      const publishSome = (from: number, count: number) =>
        publishMany(
          db.pool,
          Array.from({ length: count }, (_, i) => ({
            topic,
            key: `k${(from + i) % 5}`,
            payload: { n: from + i },
          })),
        );
      await publishSome(0, 100);
      await waitFor(async () => (await countDelivered(topic)) === 100, { timeoutMs: 30_000 });
      await server.stop();
      // Published while the broker is down: the relay fails them (without spending their
      // attempts) and keeps retrying.
      await publishSome(100, 100);
      await waitFor(
        async () => {
          const { rows } = await db.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM skiplock.outbox_messages WHERE topic = $1 AND last_error IS NOT NULL AND status = 'pending'`,
            [topic],
          );
          return (rows[0]?.n ?? 0) > 0;
        },
        { what: 'a failed delivery while the broker is down' },
      );
      await server.start();
      await publishSome(200, 100);
      await waitFor(async () => (await countDelivered(topic)) === 300, {
        timeoutMs: 60_000,
        what: 'all 300 delivered after the restart',
      });
      const nc = await connect({ servers: server.url });
      try {
        const seen = await streamMessages(nc, stream);
        expect(seen.map((m) => m.n).sort((a, b) => a - b)).toEqual(
          Array.from({ length: 300 }, (_, i) => i),
        );
        for (const [, order] of orderByKey(seen)) {
          expect(order).toEqual([...order].sort((a, b) => a - b));
        }
      } finally {
        await nc.close();
      }
      expect((await outboxCounts(db.pool)).dead).toBe(0);
    },
  );
});

async function countDelivered(topic: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM skiplock.outbox_messages WHERE topic = $1 AND status = 'delivered'`,
    [topic],
  );
  return rows[0]?.n ?? 0;
}
