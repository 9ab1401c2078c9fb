import { randomUUID } from 'node:crypto';
import { connect, type ConsumeMessage } from 'amqplib';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { createRelay, publishMany } from '../src/index.js';
import { rabbitmqSink } from '../src/sinks/rabbitmq.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { amqpUrl, brokerAvailable } from './brokers.js';
import { closeConnection, connectionsNamed } from './rabbitmq.js';

const available = await brokerAvailable('RabbitMQ', amqpUrl, 5672);
const db = await useTestDatabase();

const closers: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const close of closers.reverse()) await close().catch(() => {});
});

describe.skipIf(!available)('relay to RabbitMQ', () => {
  it('reconnects when the broker closes its connection and loses nothing, keeping key order', async () => {
    const admin = await connect(amqpUrl);
    closers.push(() => admin.close());
    const channel = await admin.createChannel();
    const exchange = `skiplock-relay-test-${randomUUID()}`;
    await channel.assertExchange(exchange, 'topic', { durable: true });
    closers.push(() => channel.deleteExchange(exchange));
    const { queue } = await channel.assertQueue('', { exclusive: true, autoDelete: true });
    await channel.bindQueue(queue, exchange, '#');
    const received: ConsumeMessage[] = [];
    await channel.consume(queue, (m) => m && received.push(m), { noAck: true });

    const connectionName = `skiplock-relay-test-${randomUUID()}`;
    const logs = captureLogs();
    const sink = rabbitmqSink({ url: amqpUrl, exchange, connectionName, logger: logs.logger });
    const topic = `relay.rabbit.${randomUUID().slice(0, 8)}`;
    const relay = createRelay({
      pool: db.pool,
      sink,
      topics: [topic],
      batchSize: 25,
      logger: pino({ level: 'silent' }),
      backoff: { baseMs: 100, maxMs: 500, factor: 2, jitter: 0.2 },
      maxAttempts: 1_000,
    });
    relay.start();
    closers.push(async () => {
      await relay.stop();
      await sink.close();
    });

    const total = 600;
    const published: { key: string; n: number; id: string }[] = [];
    let closedAt = -1;
    for (let t = 0; t < 12; t++) {
      const batch = Array.from({ length: total / 12 }, (_, i) => {
        const n = t * (total / 12) + i;
        return { key: `k${n % 10}`, n };
      });
      const ids = await publishMany(
        db.pool,
        batch.map((m) => ({ topic, key: m.key, payload: { n: m.n } })),
      );
      published.push(...batch.map((m, i) => ({ ...m, id: ids[i]! })));
      if (t === 3) {
        // Mid-run, with the relay busy: the broker drops the relay's connection.
        await waitFor(() => (received.length > 0 ? true : null));
        const [pid] = await waitFor(async () => {
          const pids = await connectionsNamed(connectionName);
          return pids.length > 0 ? pids : null;
        });
        closedAt = received.length;
        await closeConnection(pid!, 'test closes the relay connection');
      }
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
    await waitFor(() =>
      new Set(received.map((m) => m.properties.messageId)).size >= total ? true : null,
    );
    expect(logs.reasons()).toEqual(
      expect.arrayContaining(['amqp_connection_lost', 'amqp_reconnect']),
    );
    expect(closedAt).toBeGreaterThan(0);
    expect(closedAt).toBeLessThan(total);
    // Every message arrived; one sent again after the close carries its first id.
    const byId = new Map(published.map((p) => [p.id, p]));
    for (const m of received) {
      const body = JSON.parse(m.content.toString('utf8')) as { n: number };
      expect(byId.get(String(m.properties.messageId))?.n).toBe(body.n);
    }
    expect(new Set(received.map((m) => String(m.properties.messageId)))).toEqual(
      new Set(byId.keys()),
    );
    // Per key, first arrivals in publish order: a key's next message waited for its confirm.
    const firsts = new Map<string, number[]>();
    const seen = new Set<string>();
    for (const m of received) {
      const id = String(m.properties.messageId);
      if (seen.has(id)) continue;
      seen.add(id);
      const { key, n } = byId.get(id)!;
      firsts.set(key, [...(firsts.get(key) ?? []), n]);
    }
    for (const [key, order] of firsts) {
      expect(order, key).toEqual(published.filter((p) => p.key === key).map((p) => p.n));
    }
    expect(await connectionsNamed(connectionName)).toHaveLength(1);
  });
});
