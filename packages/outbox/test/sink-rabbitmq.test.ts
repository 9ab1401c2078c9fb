import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import { connect, type Channel, type ChannelModel, type ConsumeMessage } from 'amqplib';
import { pino } from 'pino';
import { ConfigError } from '@skiplock/queue';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Delivery, OutboxMessage } from '../src/sink.js';
import {
  rabbitmqSink,
  type RabbitMqSink,
  type RabbitMqSinkOptions,
} from '../src/sinks/rabbitmq.js';
import { amqpUrl, brokerAvailable } from './brokers.js';
import { connectionsNamed } from './rabbitmq.js';

const available = await brokerAvailable('RabbitMQ', amqpUrl, 5672);
const run = promisify(execFile);

const topic = 'orders.created';

function message(id: number, key: string | null, overrides: Partial<OutboxMessage> = {}) {
  return {
    id: String(id),
    topic,
    key,
    payload: { id, key, note: 'ünïcode ✓' },
    headers: { 'trace-id': `trace-${id}` },
    attempt: 1,
    createdAt: new Date(),
    ...overrides,
  } satisfies OutboxMessage;
}

/** Polls until `check` is true; generous, since the machine running the tests may be slow. */
async function waitFor(check: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

describe.skipIf(!available)('rabbitmqSink', () => {
  let admin: ChannelModel;
  let channel: Channel;
  const cleanups: (() => Promise<unknown>)[] = [];

  beforeAll(async () => {
    admin = await connect(amqpUrl);
    channel = await admin.createChannel();
  });

  afterAll(async () => {
    await admin?.close();
  });

  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  });

  function sinkOf(options: RabbitMqSinkOptions): RabbitMqSink {
    const sink = rabbitmqSink({ url: amqpUrl, ...options });
    cleanups.push(() => sink.close());
    return sink;
  }

  /** A durable topic exchange (what the sink asserts), deleted after the test. */
  async function exchange(): Promise<string> {
    const name = `skiplock-outbox-test-${randomUUID()}`;
    await channel.assertExchange(name, 'topic', { durable: true });
    cleanups.push(() => channel.deleteExchange(name));
    return name;
  }

  /** An exclusive queue bound to the exchange, collecting what reaches it. */
  async function consumer(exchangeName: string, pattern = '#'): Promise<ConsumeMessage[]> {
    const { queue } = await channel.assertQueue('', { exclusive: true, autoDelete: true });
    await channel.bindQueue(queue, exchangeName, pattern);
    const received: ConsumeMessage[] = [];
    await channel.consume(queue, (m) => m && received.push(m), { noAck: true });
    cleanups.push(() => channel.deleteQueue(queue));
    return received;
  }

  function logCapture() {
    const lines: Record<string, unknown>[] = [];
    const logger = pino(
      { level: 'debug' },
      { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) },
    );
    return { logger, lines, reasons: () => lines.map((l) => l.reason) };
  }

  const bodyOf = (m: ConsumeMessage) => JSON.parse(m.content.toString('utf8')) as { id: number };

  it('delivers a batch with confirms: properties, headers, body, per-key order', async () => {
    const name = await exchange();
    const received = await consumer(name);
    const sink = sinkOf({ exchange: name, exchangeType: 'topic', messageIdPrefix: 'test-' });
    const createdAt = new Date('2030-01-02T03:04:05.678Z');
    const keyed = Array.from({ length: 50 }, (_, i) => message(i + 1, `k${i % 5}`, { createdAt }));
    const unkeyed = [message(51, null), message(52, null)];
    const batch = [...keyed, ...unkeyed];

    const deliveries = await sink.deliver(batch, new AbortController().signal);

    expect(sink.name).toBe('rabbitmq');
    expect(deliveries).toEqual(batch.map(() => ({ ok: true })));
    await waitFor(() => received.length >= batch.length, 'every message');
    await new Promise((resolve) => setTimeout(resolve, 200)); // a duplicate would show up here
    expect(received).toHaveLength(batch.length);
    expect(new Set(received.map((m) => m.properties.messageId)).size).toBe(batch.length);

    for (const m of received) {
      const sent = batch.find((b) => `test-${b.id}` === m.properties.messageId)!;
      expect(sent).toBeDefined();
      expect(m.fields.routingKey).toBe(topic);
      expect(m.properties).toMatchObject({
        deliveryMode: 2,
        contentType: 'application/json',
        type: topic,
        timestamp: Math.floor(sent.createdAt.getTime() / 1000),
      });
      expect(bodyOf(m)).toEqual(sent.payload);
      const headers = { 'trace-id': `trace-${sent.id}` };
      expect(m.properties.headers).toEqual(
        sent.key === null ? headers : { ...headers, 'skiplock-key': sent.key },
      );
    }
    for (let k = 0; k < 5; k++) {
      const ids = received
        .filter((m) => m.properties.headers?.['skiplock-key'] === `k${k}`)
        .map((m) => bodyOf(m).id);
      expect(ids).toHaveLength(10);
      expect(ids).toEqual([...ids].sort((a, b) => a - b));
    }
  });

  it('waits for the write buffer to drain in a batch larger than it', async () => {
    const name = await exchange();
    const received = await consumer(name);
    const sink = sinkOf({ exchange: name });
    // amqplib's channel buffer holds 1024 frames before publish() asks the caller to wait.
    const batch = Array.from({ length: 3_000 }, (_, i) => message(i + 1, `k${i % 7}`));

    const deliveries = await sink.deliver(batch, new AbortController().signal);

    expect(deliveries.filter((d) => d.ok)).toHaveLength(batch.length);
    await waitFor(() => received.length >= batch.length, 'every message');
    expect(new Set(received.map((m) => m.properties.messageId)).size).toBe(batch.length);
  });

  it('with mandatory, fails (retryably) a message no queue is bound for', async () => {
    const name = await exchange();
    const received = await consumer(name, 'routed.#');
    const sink = sinkOf({ exchange: name, mandatory: true });
    const batch = [
      message(1, 'a', { topic: 'routed.one' }),
      message(2, 'b', { topic: 'nowhere.two' }),
      message(3, 'c', { topic: 'routed.three' }),
    ];

    const [first, second, third] = await sink.deliver(batch, new AbortController().signal);

    expect(first).toEqual({ ok: true });
    expect(third).toEqual({ ok: true });
    expect(second).toMatchObject({ ok: false, error: expect.stringMatching(/unroutable/) });
    expect((second as Extract<Delivery, { ok: false }>).permanent).toBeFalsy();
    await waitFor(() => received.length >= 2, 'the routed messages');
    expect(received.map((m) => m.properties.messageId).sort()).toEqual(['1', '3']);
  });

  it('reconnects after the broker closes its connection, losing nothing', async () => {
    const name = await exchange();
    const received = await consumer(name);
    const connectionName = `skiplock-outbox-test-${randomUUID()}`;
    const { logger, lines, reasons } = logCapture();
    // The URL carries guest's password: the logs must not.
    const sink = sinkOf({ exchange: name, connectionName, logger });
    const signal = new AbortController().signal;

    const before = Array.from({ length: 10 }, (_, i) => message(i + 1, null));
    expect(await sink.deliver(before, signal)).toEqual(before.map(() => ({ ok: true })));
    const connections = await connectionsNamed(connectionName);
    expect(connections).toHaveLength(1);

    // Keep publishing while the broker closes the connection (messages in flight then fail),
    // re-sending what failed as a relay would, until the sink has seen the connection go: the
    // next batch must reconnect and get through whole.
    const closing = run('rabbitmqctl', [
      'close_connection',
      connections[0]!,
      'test closes it',
    ]).then(
      () => 'closed',
      (error: unknown) => error,
    );
    let closed: unknown;
    void closing.then((result) => (closed = result));
    let nextId = 11;
    let queued: OutboxMessage[] = [];
    const okIds = new Set(before.map((m) => m.id));
    const failures: Delivery[] = [];
    const deadline = Date.now() + 40_000;
    while (Date.now() < deadline) {
      const afterLoss = reasons().includes('amqp_connection_lost');
      const batch = [...queued, ...Array.from({ length: 5 }, () => message(nextId++, null))];
      const deliveries = await sink.deliver(batch, signal);
      queued = [];
      deliveries.forEach((d, i) => {
        if (d.ok) okIds.add(batch[i]!.id);
        else {
          failures.push(d);
          queued.push({ ...batch[i]!, attempt: batch[i]!.attempt + 1 });
        }
      });
      if (afterLoss || (closed !== undefined && closed !== 'closed')) break;
      if (closed !== undefined) await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(await closing).toBe('closed');

    expect(reasons()).toContain('amqp_connection_lost');
    expect(reasons()).toContain('amqp_reconnect');
    expect(queued).toEqual([]);
    for (const failure of failures) {
      // A lost connection is no fault of the messages: none of them is charged an attempt.
      expect(failure).toMatchObject({
        ok: false,
        error: expect.stringMatching(/FORCED|closed/),
        unavailable: true,
      });
      expect((failure as Extract<Delivery, { ok: false }>).permanent).toBeFalsy();
    }

    const after = [message(nextId++, 'x'), message(nextId++, 'x')];
    expect(await sink.deliver(after, signal)).toEqual([{ ok: true }, { ok: true }]);
    for (const m of after) okIds.add(m.id);

    await waitFor(
      () => new Set(received.map((m) => m.properties.messageId)).size >= okIds.size,
      'every confirmed message',
    );
    const seen = new Set(received.map((m) => m.properties.messageId as string));
    expect([...okIds].filter((id) => !seen.has(id))).toEqual([]);
    // A re-sent message carries the same id as its first send.
    for (const m of received) expect(m.properties.messageId).toBe(String(bodyOf(m).id));
    expect(await connectionsNamed(connectionName)).toHaveLength(1);

    const logged = JSON.stringify(lines);
    expect(logged).not.toContain(':guest@');
    expect(logged).not.toContain('ünïcode');
  });

  it('fails deliveries to a missing exchange without throwing, then recovers', async () => {
    const name = `skiplock-outbox-test-${randomUUID()}`;
    const { logger, reasons } = logCapture();
    const sink = sinkOf({ exchange: name, logger });
    const signal = new AbortController().signal;
    const batch = [message(1, 'a'), message(2, 'b'), message(3, 'a')];

    const deliveries = await sink.deliver(batch, signal);

    expect(deliveries).toHaveLength(3);
    for (const d of deliveries) {
      expect(d).toMatchObject({ ok: false, error: expect.stringMatching(/NOT_FOUND|404/) });
      expect((d as Extract<Delivery, { ok: false }>).permanent).toBeFalsy();
      // The broker's verdict on a live connection, not an outage: it counts an attempt.
      expect((d as Extract<Delivery, { ok: false }>).unavailable).toBeFalsy();
    }
    await waitFor(() => reasons().includes('amqp_channel_lost'), 'the channel loss to be logged');

    await channel.assertExchange(name, 'topic', { durable: true });
    cleanups.push(() => channel.deleteExchange(name));
    const received = await consumer(name);
    expect(await sink.deliver(batch, signal)).toEqual(batch.map(() => ({ ok: true })));
    await waitFor(() => received.length >= 3, 'the messages after recovery');
    // A channel error closes only the channel: the sink kept its connection.
    expect(reasons()).not.toContain('amqp_connection_lost');
    expect(reasons()).not.toContain('amqp_reconnect');
  });

  it('fails unconfirmed messages when the signal aborts, and stays usable', async () => {
    const name = await exchange();
    const received = await consumer(name);
    const controller = new AbortController();
    // Aborts while publishing the third message: its confirm and those of the two before it
    // cannot have arrived yet, and the fourth is never sent.
    const sink = sinkOf({
      exchange: name,
      routingKey: (m) => {
        if (m.id === '3') controller.abort(new Error('batch deadline'));
        return m.topic;
      },
    });
    const alreadyAborted = AbortSignal.abort();

    const first = await sink.deliver([message(1, 'a')], alreadyAborted);
    const second = await sink.deliver(
      [1, 2, 3, 4].map((id) => message(id, 'b')),
      controller.signal,
    );

    // Nothing of an already-aborted batch is sent: its attempts do not count.
    expect(first).toEqual([{ ok: false, error: expect.stringMatching(/aborted/), notSent: true }]);
    expect(second).toHaveLength(4);
    // 1 to 3 went out (3's routing key aborted the batch as it was published); 4 never did.
    expect(second.map((d) => (d.ok ? 'ok' : d.notSent))).toEqual([false, false, false, true]);
    for (const d of second) {
      expect(d).toMatchObject({
        ok: false,
        error: expect.stringMatching(/aborted.*batch deadline/),
      });
    }

    const later = [message(5, 'c')];
    expect(await sink.deliver(later, new AbortController().signal)).toEqual([{ ok: true }]);
    await waitFor(() => received.some((m) => m.properties.messageId === '5'), 'message 5');
    // What was published before the abort may have arrived (one channel keeps order, so 4 would
    // be here before 5); what came after it was not sent.
    expect(received.map((m) => m.properties.messageId)).not.toContain('4');
  });
});

describe('rabbitmqSink without a broker', () => {
  it('refuses options it would misroute or fail every publish with, naming each', () => {
    const url = 'amqp://guest:guest@127.0.0.1:5672';
    const refused: [Record<string, unknown>, string][] = [
      // Before: published, confirmed, to the default exchange (queues named after the topics).
      [{ url }, "exchange must be a string (give '' explicitly for the default exchange)"],
      // Before: the channel closed at every batch, until the messages went dead.
      [{ url, exchange: 'x', exchangeType: 'bogus' }, 'exchangeType must be one of topic, direct'],
      [{ url, exchange: 'x', routingKey: 'orders' }, 'routingKey must be a function'],
      [{ url: 'http://127.0.0.1:5672', exchange: 'x' }, 'url must be an amqp:// or amqps:// URL'],
      // Not URLs as amqplib reads them: a byte-order mark before it, a port out of range.
      [{ url: '\uFEFFamqp://127.0.0.1', exchange: 'x' }, 'url must be an amqp:// or amqps:// URL'],
      [{ url: 'amqp://127.0.0.1:99999', exchange: 'x' }, 'url must be an amqp:// or amqps:// URL'],
      [{ url, exchange: 'x', messageIdPrefix: 3 }, 'messageIdPrefix must be a string'],
      [{ url, exchange: 'x', mandatory: 'yes' }, 'mandatory must be true or false'],
    ];
    for (const [options, what] of refused) {
      const make = () => rabbitmqSink(options as never);
      expect(make).toThrow(ConfigError);
      expect(make).toThrow(`rabbitmqSink options: ${what}`);
    }
    expect(rabbitmqSink({ url, exchange: '' }).name).toBe('rabbitmq');
    // As amqplib reads a URL: the scheme in any case, spaces around it.
    expect(rabbitmqSink({ url: ' AMQP://guest:guest@127.0.0.1:5672 ', exchange: 'x' }).name).toBe(
      'rabbitmq',
    );
  });

  it('fails every message of the batch, without throwing, when it cannot connect', async () => {
    const sink = rabbitmqSink({ url: 'amqp://guest:guest@127.0.0.1:1', exchange: 'any' });
    try {
      const deliveries = await sink.deliver(
        [message(1, 'a'), message(2, null)],
        new AbortController().signal,
      );
      // The broker's outage, not the messages' fault: the relay gives their attempts back.
      expect(deliveries).toEqual([
        { ok: false, error: expect.stringMatching(/ECONNREFUSED/), unavailable: true },
        { ok: false, error: expect.stringMatching(/ECONNREFUSED/), unavailable: true },
      ]);
    } finally {
      await sink.close();
    }
  });
});
