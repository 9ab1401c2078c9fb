import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { ConfigError } from '@skiplock/queue';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Delivery, OutboxMessage } from '../src/sink.js';
import {
  ensureStream,
  KEY_HEADER,
  natsSink,
  TOPIC_HEADER,
  type NatsSink,
  type NatsSinkOptions,
} from '../src/sinks/nats.js';
import { brokerAvailable, natsUrl } from './brokers.js';
import { readStream, streamNames as names } from './jetstream.js';
import {
  findNatsServer,
  freePort,
  startNatsServer,
  type PrivateNatsServer,
} from './nats-server.js';

const available = await brokerAvailable('NATS', natsUrl, 4222);
const natsServer = findNatsServer();
if (!natsServer && !process.env.CI) {
  console.warn(
    'the NATS broker-restart test is skipped: no `nats-server` binary on PATH or in /usr/sbin',
  );
}

const KEYS = ['k0', 'k1', 'k2', 'k3', 'k4'];

/** Messages `first`..`first+count-1`, keyed round-robin over `KEYS`; every tenth has no key. */
function batch(prefix: string, first: number, count: number): OutboxMessage[] {
  return Array.from({ length: count }, (_, i) => {
    const id = first + i;
    return {
      id: String(id),
      topic: `${prefix}.orders.created`,
      key: id % 10 === 0 ? null : KEYS[id % KEYS.length]!,
      payload: { id, items: [{ sku: `sku-${id}`, qty: id % 3 }], note: 'ünïcode ✓' },
      headers: { 'trace-id': `trace-${id}` },
      attempt: 1,
      createdAt: new Date(),
    } satisfies OutboxMessage;
  });
}

function idsOf(deliveries: readonly Delivery[], messages: readonly OutboxMessage[], ok: boolean) {
  return messages.filter((_, i) => deliveries[i]!.ok === ok).map((m) => m.id);
}

async function streamCount(jsm: JetStreamManager, stream: string): Promise<number> {
  return (await jsm.streams.info(stream)).state.messages;
}

/** Each test's resources, released after it whatever happened. */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

describe.skipIf(!available)('natsSink against the broker', () => {
  let nc: NatsConnection;
  let jsm: JetStreamManager;

  beforeAll(async () => {
    nc = await connect({ servers: natsUrl, name: 'skiplock-outbox-test' });
    jsm = await jetstreamManager(nc);
  });

  afterAll(async () => {
    await nc?.close();
  });

  async function stream(): Promise<{ stream: string; prefix: string }> {
    const n = names();
    await ensureStream({ connection: nc, name: n.stream, subjects: [`${n.prefix}.>`] });
    cleanups.push(() => jsm.streams.delete(n.stream));
    return n;
  }

  function sinkOf(options: NatsSinkOptions = {}): NatsSink {
    const sink = natsSink({ servers: natsUrl, ...options });
    cleanups.push(() => sink.close());
    return sink;
  }

  it('delivers a batch: payload as JSON, Nats-Msg-Id, headers, per-key order', async () => {
    const { stream: name, prefix } = await stream();
    const sink = sinkOf({ msgIdPrefix: 'orders-' });
    const messages = batch(prefix, 1, 50);

    const deliveries = await sink.deliver(messages, new AbortController().signal);

    expect(deliveries).toEqual(messages.map(() => ({ ok: true })));
    const stored = await readStream(nc, name);
    expect(stored).toHaveLength(50);
    const byId = new Map(messages.map((m) => [`orders-${m.id}`, m]));
    for (const m of stored) {
      const sent = byId.get(m.headers?.get('Nats-Msg-Id') ?? '');
      expect(sent, `stored message ${m.seq} has a known Nats-Msg-Id`).toBeDefined();
      expect(m.subject).toBe(sent!.topic);
      expect(m.json()).toEqual(sent!.payload);
      expect(m.headers!.get(TOPIC_HEADER)).toBe(sent!.topic);
      expect(m.headers!.has(KEY_HEADER)).toBe(sent!.key !== null);
      if (sent!.key !== null) expect(m.headers!.get(KEY_HEADER)).toBe(sent!.key);
      expect(m.headers!.get('trace-id')).toBe(`trace-${sent!.id}`);
    }
    // A relay hands the sink one message per key at a time; even a batch with many, as here, keeps
    // their order, since the publishes leave in call order on one connection.
    for (const key of KEYS) {
      const inStream = stored
        .filter((m) => m.headers!.get(KEY_HEADER) === key)
        .map((m) => m.headers!.get('Nats-Msg-Id'));
      const published = messages.filter((m) => m.key === key).map((m) => `orders-${m.id}`);
      expect(inStream, `order of key ${key}`).toEqual(published);
    }
  });

  it('acks a replay as delivered, and the duplicate window keeps one copy', async () => {
    const { stream: name, prefix } = await stream();
    const messages = batch(prefix, 1, 50);
    const first = sinkOf();
    expect(await first.deliver(messages, new AbortController().signal)).toEqual(
      messages.map(() => ({ ok: true })),
    );
    // A relay that crashed before marking the batch delivered replays it, on a new connection.
    await first.close();
    const replayed = sinkOf();
    const deliveries = await replayed.deliver(
      messages.map((m) => ({ ...m, attempt: 2 })),
      new AbortController().signal,
    );

    expect(deliveries).toEqual(messages.map(() => ({ ok: true })));
    expect(await streamCount(jsm, name)).toBe(50);
  });

  it('ensureStream creates a file stream, then updates it in place', async () => {
    const { stream: name, prefix } = names();
    cleanups.push(() => jsm.streams.delete(name));

    const created = await ensureStream({ servers: natsUrl, name, subjects: [`${prefix}.a.>`] });
    const updated = await ensureStream({
      connection: nc,
      name,
      subjects: [`${prefix}.a.>`, `${prefix}.b.>`],
      duplicateWindowMs: 30_000,
    });

    expect(created.config).toMatchObject({ storage: 'file', duplicate_window: 600_000_000_000 });
    expect(updated.config).toMatchObject({
      storage: 'file',
      subjects: [`${prefix}.a.>`, `${prefix}.b.>`],
      duplicate_window: 30_000_000_000,
    });
    expect(nc.isClosed()).toBe(false);
  });

  it('fails every message, retryably, on a subject no stream takes', async () => {
    const { prefix } = names();
    const sink = sinkOf();
    const messages = batch(prefix, 1, 5);

    const deliveries = await sink.deliver(messages, new AbortController().signal);

    expect(deliveries).toHaveLength(5);
    for (const d of deliveries) {
      expect(d.ok).toBe(false);
      if (d.ok) continue;
      expect(d.permanent ?? false).toBe(false);
      expect(d.error).toMatch(/no responders/);
    }
  });

  it('fails a message no retry can publish as permanent, and delivers the rest', async () => {
    const { stream: name, prefix } = await stream();
    const sink = sinkOf();
    const [good, tooLarge, badSubject, alsoGood] = batch(prefix, 1, 4) as [
      OutboxMessage,
      OutboxMessage,
      OutboxMessage,
      OutboxMessage,
    ];
    const maxPayload = nc.info!.max_payload;
    const messages = [
      good,
      { ...tooLarge, payload: 'x'.repeat(maxPayload + 1) },
      { ...badSubject, topic: `${prefix}.has space` },
      // A JetStream instruction: the stream would refuse the message on every attempt.
      { ...badSubject, headers: { 'Nats-Expected-Last-Sequence': '1' } },
      alsoGood,
    ];

    const deliveries = await sink.deliver(messages, new AbortController().signal);

    expect(deliveries).toEqual([
      { ok: true },
      { ok: false, error: expect.stringMatching(/max_payload/), permanent: true },
      { ok: false, error: expect.any(String), permanent: true },
      {
        ok: false,
        error:
          'message header "Nats-Expected-Last-Sequence" is reserved by NATS JetStream (Nats-*)',
        permanent: true,
      },
      { ok: true },
    ]);
    expect(await streamCount(jsm, name)).toBe(2);
  });

  it('fails unfinished publishes when the signal aborts, without throwing', async () => {
    const { stream: name, prefix } = await stream();
    const sink = sinkOf({ ackTimeoutMs: 60_000 });
    const aborted = new AbortController();
    aborted.abort();

    const before = await sink.deliver(batch(prefix, 1, 10), aborted.signal);

    expect(before).toHaveLength(10);
    expect(before.every((d) => !d.ok && /aborted/.test(d.error))).toBe(true);
    expect(await streamCount(jsm, name)).toBe(0);

    // Half the batch goes to a subject outside the stream whose only subscriber never answers:
    // those publishes wait for an ack that never comes, until the abort.
    const silent = nc.subscribe(`${prefix}-silent`);
    cleanups.push(async () => silent.unsubscribe());
    await nc.flush();
    const messages = batch(prefix, 11, 20).map((m, i) =>
      i % 2 === 0 ? m : { ...m, topic: `${prefix}-silent` },
    );
    const controller = new AbortController();
    const started = Date.now();
    const pending = sink.deliver(messages, controller.signal);
    // Abort once the stream holds the other half (their acks may or may not have arrived).
    while ((await streamCount(jsm, name)) < 10) await new Promise((r) => setTimeout(r, 25));
    controller.abort();
    const during = await pending;

    expect(Date.now() - started).toBeLessThan(30_000);
    expect(during).toHaveLength(20);
    for (const [i, d] of during.entries()) {
      if (i % 2 === 1)
        expect(d).toMatchObject({ ok: false, error: expect.stringMatching(/abort/) });
      else if (!d.ok) expect(d.error).toMatch(/abort/);
    }
    // What was reported delivered is in the stream.
    const stored = new Set((await readStream(nc, name)).map((m) => m.headers!.get('Nats-Msg-Id')));
    for (const id of idsOf(during, messages, true)) expect(stored.has(id)).toBe(true);
  });

  it('leaves the caller’s connection open on close', async () => {
    const { stream: name, prefix } = await stream();
    const own = await connect({ servers: natsUrl });
    cleanups.push(() => own.close());
    const sink = natsSink({ connection: own });

    const deliveries = await sink.deliver(batch(prefix, 1, 3), new AbortController().signal);
    await sink.close();

    expect(deliveries.every((d) => d.ok)).toBe(true);
    expect(own.isClosed()).toBe(false);
    expect(await streamCount(jsm, name)).toBe(3);
  });
});

describe.skipIf(!natsServer && !process.env.CI)('natsSink across a broker restart', () => {
  let server: PrivateNatsServer | undefined;

  afterAll(async () => {
    await server?.dispose();
  });

  it('fails publishes while the broker is down, then delivers every message once', async () => {
    if (!natsServer)
      throw new Error('no `nats-server` binary on PATH or in /usr/sbin; CI needs it');
    server = await startNatsServer(natsServer);
    const { stream: name, prefix } = names();
    await ensureStream({ servers: server.url, name, subjects: [`${prefix}.>`] });
    const logs: { reason?: string }[] = [];
    const logger = pino(
      { level: 'debug' },
      { write: (line: string) => logs.push(JSON.parse(line)) },
    );
    const sink = natsSink({ servers: server.url, ackTimeoutMs: 1_500, logger });
    cleanups.push(() => sink.close());
    const first = batch(prefix, 1, 20);
    const second = batch(prefix, 21, 20);
    const signal = () => AbortSignal.timeout(30_000);

    expect(await sink.deliver(first, signal())).toEqual(first.map(() => ({ ok: true })));

    await server.stop();
    // The batch starts while the broker is down; the broker comes back while it waits for acks.
    const pending = sink.deliver(second, signal());
    await new Promise((resolve) => setTimeout(resolve, 300));
    await server.start();
    const during = await pending;
    expect(during).toHaveLength(20);

    // What it reported delivered is stored: read before any retry could store it.
    const nc = await connect({ servers: server.url });
    cleanups.push(() => nc.close());
    const storedIds = async () =>
      (await readStream(nc, name)).map((m) => m.headers!.get('Nats-Msg-Id'));
    const afterOutage = new Set(await storedIds());
    for (const id of idsOf(during, second, true)) expect(afterOutage.has(id)).toBe(true);

    // The relay retries what failed until the stream takes it.
    let left = second.filter((_, i) => !during[i]!.ok);
    const deadline = Date.now() + 45_000;
    while (left.length > 0) {
      if (Date.now() > deadline) throw new Error(`${left.length} messages still undelivered`);
      const retried = await sink.deliver(left, signal());
      left = left.filter((_, i) => !retried[i]!.ok);
      if (left.length > 0) await new Promise((resolve) => setTimeout(resolve, 250));
    }

    const ids = await storedIds();
    expect(ids).toHaveLength(40);
    expect([...ids].sort()).toEqual([...first, ...second].map((m) => m.id).sort());
    const reasons = logs.map((l) => l.reason);
    expect(reasons).toContain('nats_disconnect');
    expect(reasons).toContain('nats_reconnect');
    expect(JSON.stringify(logs)).not.toContain('sku-');

    // Closing while the broker is down returns (a drain would wait for it, or fail and leave the
    // connection reconnecting).
    await server.stop();
    await sink.close();
  });
});

describe('natsSink without a broker', () => {
  it('refuses an ackTimeoutMs that is not whole ms from 1 to an hour, naming it and the value', () => {
    // Past 2^31-1 ms (Infinity too) Node fires the timeout after 1 ms: every publish would fail.
    for (const ackTimeoutMs of [3_000_000_000, 2 ** 31, 3_600_001, Infinity, NaN, 0, 0.5]) {
      const make = () => natsSink({ servers: natsUrl, ackTimeoutMs });
      expect(make).toThrow(ConfigError);
      expect(make).toThrow(
        `natsSink options: ackTimeoutMs must be an integer from 1 to 3600000, got ${ackTimeoutMs}`,
      );
    }
    expect(natsSink({ servers: natsUrl, ackTimeoutMs: 3_600_000 }).name).toBe('nats');
  });

  it('refuses a subject that is no function and a msgIdPrefix a header cannot carry', () => {
    // Before: accepted; every publish failed on "subject is not a function" until the messages
    // went dead.
    expect(() => natsSink({ servers: natsUrl, subject: 'orders' as never })).toThrow(
      'natsSink options: subject must be a function of the message returning its subject',
    );
    for (const msgIdPrefix of [7, 'a\r\nb', 'tab\t']) {
      expect(() => natsSink({ servers: natsUrl, msgIdPrefix: msgIdPrefix as never })).toThrow(
        'natsSink options: msgIdPrefix must be a string without control characters',
      );
    }
    expect(natsSink({ servers: natsUrl, msgIdPrefix: 'billing-' }).name).toBe('nats');
  });

  it('fails every message when it cannot connect, and connects again on the next batch', async () => {
    const url = `nats://127.0.0.1:${await freePort()}`;
    const sink = natsSink({ servers: url });
    cleanups.push(() => sink.close());
    const messages = batch('outbox-test.unreachable', 1, 3);

    for (let attempt = 0; attempt < 2; attempt++) {
      const deliveries = await sink.deliver(messages, new AbortController().signal);
      expect(deliveries).toHaveLength(3);
      // The broker's outage, not the messages' fault: the relay gives their attempts back.
      for (const d of deliveries) expect(d).toMatchObject({ ok: false, unavailable: true });
      expect(deliveries.some((d) => !d.ok && d.permanent)).toBe(false);
    }
  });
});
