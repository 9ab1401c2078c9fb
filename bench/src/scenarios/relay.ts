import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { pino } from 'pino';
import { migrate } from '@skiplock/queue';
import { outboxMigrations, publish, publishMany } from '@skiplock/outbox';
import { broker, brokerIds } from '../brokers/index.js';
import { benchEvent, WARMUP_TOPIC, type Broker } from '../brokers/types.js';
import { spawnChild, sleep, type ChildHandle } from '../harness.js';
import { isRelayClaim } from '../relay-child.js';
import { account, type Measurement } from '../measurement.js';
import type { ChildReport } from '../protocol.js';
import type { ScenarioResult, ScenarioRow } from '../results.js';
import {
  processCpuSeconds,
  sampleServer,
  serverDelta,
  settledXacts,
  type ServerDelta,
  type ServerSample,
} from '../server.js';
import { quantile } from '../stats.js';
import { labelOf } from '../systems/labels.js';
import { sharedClockMs } from '../systems/types.js';
import { installedDatabase } from '../templates.js';

export interface RelayOptions {
  adminUrl: string;
  quick: boolean;
  reps: number;
  log: (line: string) => void;
}

export const RELAY = 'skiplock-relay';
export const DIRECT = 'broker-direct';
const logger = pino({ level: 'warn' });

/** What the relay runs with, and what the ceiling copies: reported in the notes. */
const relaySettings = {
  batchSize: 100,
  concurrency: 4,
  keys: 1_000,
};

/** Config names: the targets find the throughput rows by the broker's label. */
const throughputConfig = (b: Broker) => b.label;
const latencyConfig = (b: Broker, rate: number) => `${b.label} · ${rate}/s`;

/**
 * Counts the run's messages as a consumer receives them, each once; resolves `all` when every
 * one of `expected` has come.
 */
function tally(expected: number) {
  let resolveAll: () => void = () => {};
  const all = new Promise<void>((resolve) => (resolveAll = resolve));
  const seen = new Uint8Array(expected);
  const lastOfKey = new Map<number, number>();
  const state = {
    received: 0,
    duplicates: 0,
    /** Messages that came after a later message of their key (per-key order broken). */
    outOfOrder: 0,
    all,
    add(i: number, keys: number) {
      if (seen[i]) {
        state.duplicates += 1;
        return;
      }
      seen[i] = 1;
      const key = i % keys;
      if ((lastOfKey.get(key) ?? -1) > i) state.outOfOrder += 1;
      lastOfKey.set(key, i);
      state.received += 1;
      if (state.received === expected) resolveAll();
    },
  };
  return state;
}

function within(work: Promise<void>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    work.then(() => true),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** An empty database with the outbox table (cloned from a template migrated once). */
export function outboxDatabase(adminUrl: string) {
  return installedDatabase(adminUrl, 'outbox', (url) =>
    migrate({ connectionString: url, include: [outboxMigrations], logger }).then(() => {}),
  );
}

/** `count` messages written into the outbox in chunks of 1,000 (one statement each), analyzed. */
export async function fillOutbox(url: string, count: number, keys: number): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (let from = 0; from < count; from += 1_000) {
      const chunk = Array.from({ length: Math.min(1_000, count - from) }, (_, n) => {
        const e = benchEvent(from + n, keys);
        return { topic: e.topic, key: e.key, payload: e.payload };
      });
      await publishMany(client, chunk);
    }
    await client.query('ANALYZE skiplock.outbox_messages');
  } finally {
    await client.end();
  }
}

/** The relay run's database and a connection to sample it; the ceiling has none. */
interface DbRun {
  admin: pg.Client;
  name: string;
  url: string;
  drop(): Promise<void>;
}

async function openDb(adminUrl: string): Promise<DbRun> {
  const db = await outboxDatabase(adminUrl);
  const admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  return { admin, name: db.name, url: db.url, drop: db.drop };
}

const noDatabase: ServerDelta = { walBytes: 0, xacts: 0, cpuSeconds: null };

/** Per-batch figures of the relay: where its time goes (claim, sink, settle). */
function relayExtras(report: ChildReport, events: number): Record<string, number | null> {
  // The settle: the relay's UPDATE of the table under the alias m that is not its claim (the
  // statement's text changes as the outbox does; both stay recognizable by these).
  const settle = Object.entries(report.counts.statements).find(
    ([k]) => k.includes('UPDATE skiplock.outbox_messages m ') && !isRelayClaim(k),
  )?.[1];
  const claims = report.claimLatencies.length;
  return {
    claimP50Ms: quantile(report.claimLatencies, 0.5),
    settleMeanMs: settle && settle.calls > 0 ? settle.totalMs / settle.calls : null,
    batchP50Ms: quantile(report.latencies, 0.5),
    perClaim: claims > 0 ? events / claims : null,
  };
}

/**
 * Throughput: `count` messages over `keys` keys reach a consumer, through the outbox (written in
 * bulk first, then relayed) or straight from the broker's client in the relay's shape. The clock
 * runs from `go` to the consumer's last message.
 */
async function throughputRun(
  o: RelayOptions,
  b: Broker,
  system: string,
  count: number,
): Promise<Measurement> {
  const tag = randomBytes(4).toString('hex');
  const keys = relaySettings.keys;
  const db = system === RELAY ? await openDb(o.adminUrl) : null;
  let child: ChildHandle | null = null;
  let consumer: { close(): Promise<void> } | null = null;
  try {
    await b.create(tag);
    child = spawnChild({
      role: system === RELAY ? 'relay' : 'direct',
      system,
      broker: b.id,
      tag,
      ...(db ? { url: db.url } : {}),
      batchSize: relaySettings.batchSize,
      concurrency: relaySettings.concurrency,
      count,
      keys,
    });
    await child.ready;
    if (db) await fillOutbox(db.url, count, keys);
    const got = tally(count);
    consumer = await b.consumer(tag, (p) => got.add(p.i, keys));
    const before = db ? await sampleServer(db.admin, db.name) : null;
    const brokerCpu = processCpuSeconds(b.processName);
    const t0 = performance.now();
    child.send({ type: 'go' });
    const complete = await within(got.all, 60_000);
    const elapsedMs = performance.now() - t0;
    const brokerCpuAfter = processCpuSeconds(b.processName);
    const after: ServerSample | null = db ? await sampleServer(db.admin, db.name) : null;
    const report = await child.report();
    await child.stop();
    child = null;
    const delta =
      db && before && after
        ? await serverDelta(db.admin, before, after, await settledXacts(db.admin, db.name))
        : noDatabase;
    const notes = [
      complete ? '' : `stopped at 60 s with ${got.received} of ${count} consumed`,
      got.duplicates > 0 ? `${got.duplicates} consumed twice` : '',
    ].filter(Boolean);
    return {
      value: (got.received / elapsedMs) * 1000,
      extra: {
        events: got.received,
        seconds: elapsedMs / 1000,
        outOfOrder: got.outOfOrder,
        brokerCpuMsPerEvent:
          brokerCpu !== null && brokerCpuAfter !== null && got.received > 0
            ? ((brokerCpuAfter - brokerCpu) * 1000) / got.received
            : null,
        ...(system === RELAY
          ? relayExtras(report, got.received)
          : { batchP50Ms: quantile(report.latencies, 0.5) }),
      },
      accounting: account(got.received, delta, [report]),
      ...(notes.length ? { note: notes.join('; ') } : {}),
    };
  } finally {
    await child?.stop(2_000);
    await consumer?.close().catch(() => {});
    await b.remove(tag).catch(() => {});
    await db?.admin.end();
    await db?.drop();
  }
}

/**
 * Latency: one message at a time at `rate`/s. Relayed: each in its own transaction (BEGIN,
 * publish, COMMIT), the relay waking on the commit's NOTIFY; direct: one client publish awaited.
 * Measured in this process on one clock: from the moment COMMIT (or the publish) is sent to the
 * consumer's callback.
 */
async function latencyRun(
  o: RelayOptions,
  b: Broker,
  system: string,
  opts: { count: number; warmup: number; rate: number },
): Promise<Measurement> {
  const tag = randomBytes(4).toString('hex');
  const keys = relaySettings.keys;
  const total = opts.count + opts.warmup;
  const db = system === RELAY ? await openDb(o.adminUrl) : null;
  let child: ChildHandle | null = null;
  let consumer: { close(): Promise<void> } | null = null;
  let producer: pg.Client | null = null;
  let direct: Awaited<ReturnType<Broker['publisher']>> | null = null;
  try {
    await b.create(tag);
    const sentAt = new Float64Array(total).fill(Number.NaN);
    const latencies: number[] = [];
    const got = tally(total);
    consumer = await b.consumer(tag, (p) => {
      const ms = performance.now() - sentAt[p.i]!;
      if (p.i >= opts.warmup) latencies.push(ms);
      got.add(p.i, keys);
    });
    let send: (i: number) => Promise<void>;
    if (db) {
      child = spawnChild({
        role: 'relay',
        system,
        broker: b.id,
        tag,
        url: db.url,
        batchSize: relaySettings.batchSize,
        concurrency: relaySettings.concurrency,
        count: 0,
        keys,
      });
      await child.ready;
      const client = new pg.Client({ connectionString: db.url });
      producer = client;
      await client.connect();
      send = async (i) => {
        const e = benchEvent(i, keys, sharedClockMs());
        await client.query('BEGIN');
        await publish(client, { topic: e.topic, key: e.key, payload: e.payload });
        sentAt[i] = performance.now();
        await client.query('COMMIT');
      };
    } else {
      const publisher = await b.publisher(tag);
      direct = publisher;
      await publisher.publish([{ ...benchEvent(0, 1), topic: WARMUP_TOPIC }]).catch(() => {});
      send = async (i) => {
        const e = benchEvent(i, keys, sharedClockMs());
        sentAt[i] = performance.now();
        await publisher.publish([e]);
      };
    }
    const before = db ? await sampleServer(db.admin, db.name) : null;
    child?.send({ type: 'go' });
    // Let the relay reach its idle wait (LISTEN) before the first message, as in production.
    await sleep(300);
    const interval = 1000 / opts.rate;
    const start = performance.now();
    for (let i = 0; i < total; i++) {
      const wait = start + i * interval - performance.now();
      if (wait > 0) await sleep(wait);
      await send(i);
    }
    const complete = await within(got.all, 10_000);
    const after = db ? await sampleServer(db.admin, db.name) : null;
    const report = child ? await child.report() : null;
    await child?.stop();
    child = null;
    await producer?.end();
    producer = null;
    const delta =
      db && before && after
        ? await serverDelta(db.admin, before, after, await settledXacts(db.admin, db.name))
        : noDatabase;
    return {
      value: quantile(latencies, 0.5),
      extra: {
        p50Ms: quantile(latencies, 0.5),
        p95Ms: quantile(latencies, 0.95),
        p99Ms: quantile(latencies, 0.99),
        events: latencies.length,
        outOfOrder: got.outOfOrder,
      },
      accounting: report ? account(got.received, delta, [report]) : null,
      ...(complete ? {} : { note: `${total - got.received} of ${total} never consumed` }),
    };
  } finally {
    await child?.stop(2_000);
    await producer?.end().catch(() => {});
    await direct?.close().catch(() => {});
    await consumer?.close().catch(() => {});
    await b.remove(tag).catch(() => {});
    await db?.admin.end();
    await db?.drop();
  }
}

/** The rows of a broker that cannot run, with the reason; in CI, a broker down fails the run. */
async function availability(b: Broker): Promise<string | null> {
  const reason = (await b.answers())
    ? await b.version().then(
        () => null,
        (error: unknown) => `${b.label} at ${b.where} answers but fails: ${String(error)}`,
      )
    : `${b.label} does not answer at ${b.where}`;
  if (reason && process.env.CI) throw new Error(`relay: ${reason} (CI needs it)`);
  return reason;
}

function unavailableRows(s: ScenarioResult, config: string, reason: string): void {
  for (const system of [RELAY, DIRECT]) {
    const row: ScenarioRow = { system, label: labelOf(system), config, runs: [] };
    row.unavailable = `skipped: ${reason}`;
    s.rows.push(row);
  }
}

/** Relay and ceiling of one config, repetition by repetition (A B A B), as `interleaved` does. */
async function alternate(
  o: RelayOptions,
  s: ScenarioResult,
  config: string,
  measure: (system: string) => Promise<Measurement>,
  describe: (m: Measurement) => string,
): Promise<void> {
  const rows = [RELAY, DIRECT].map((system) => {
    const row: ScenarioRow = { system, label: labelOf(system), config, runs: [] };
    s.rows.push(row);
    return row;
  });
  for (let rep = 1; rep <= o.reps; rep++) {
    for (const row of rows) {
      o.log(`${s.id} · ${config} · ${row.system} · repetition ${rep}/${o.reps}`);
      try {
        const m = await measure(row.system);
        row.runs.push(m);
        o.log(`  → ${describe(m)}${m.note ? ` (${m.note})` : ''}`);
      } catch (error) {
        const message = error instanceof Error ? error.message.split('\n')[0]! : String(error);
        o.log(`  → failed: ${message}`);
        row.runs.push({ value: null, extra: {}, accounting: null, note: `failed: ${message}` });
      }
    }
  }
}

/**
 * The outbox relay to NATS JetStream and to RabbitMQ against the same client publishing the same
 * messages with no database in between: events/s, then publish-to-consume latency at a fixed rate.
 */
export async function runRelay(o: RelayOptions): Promise<ScenarioResult[]> {
  const count = o.quick ? 2_000 : 20_000;
  const rate = 200;
  const latency = o.quick ? { count: 100, warmup: 10, rate } : { count: 1_000, warmup: 50, rate };
  const { batchSize, concurrency, keys } = relaySettings;
  const throughput: ScenarioResult = {
    id: 'relay',
    title: `Outbox relay: ${count.toLocaleString('en-US')} messages over ${keys.toLocaleString('en-US')} keys to a consumer`,
    metric: 'events/s',
    higherIsBetter: true,
    columns: {
      batchP50Ms: 'batch p50 ms',
      claimP50Ms: 'claim p50 ms',
      settleMeanMs: 'settle mean ms',
      perClaim: 'events/claim',
      brokerCpuMsPerEvent: 'broker CPU ms/event',
      outOfOrder: 'out of key order',
    },
    rows: [],
    notes: [
      `skiplock outbox relay: the messages are written into the outbox first (publishMany, 1,000 per statement, then ANALYZE); the relay (batchSize ${batchSize}, concurrency ${concurrency}, the outbox's own sink) starts on go. Ceiling: the same client in a process of its own publishes the same ${count.toLocaleString('en-US')} bodies with the same ids and headers in windows of ${batchSize}, ${concurrency} windows at once, each awaiting every ack (PubAck; publisher confirm), as the sink does; no database.`,
      'The clock runs from go to the last message a consumer (in the benchmark process) received. "batch" is one sink call (relay) or one window (ceiling), publish to last ack; "claim" and "settle" are the relay\'s statements, round trip as it sees them; round trips, xacts and WAL are per event.',
      'NATS JetStream: a file-backed stream per run, read by an ordered push consumer. RabbitMQ: a durable topic exchange and a durable classic queue per run, persistent messages, a no-ack consumer. Both are deleted after the run.',
    ],
  };
  const latencyS: ScenarioResult = {
    id: 'relay-latency',
    title: `Outbox relay latency: one message at a time at ${rate}/s, publish to consume`,
    metric: 'p50 ms',
    higherIsBetter: false,
    columns: { p95Ms: 'p95 ms', p99Ms: 'p99 ms', events: 'events', outOfOrder: 'out of key order' },
    rows: [],
    notes: [
      `${latency.count.toLocaleString('en-US')} measured messages after ${latency.warmup} warm-up ones. Relay: each message in its own transaction (BEGIN, publish, COMMIT) on one connection, the relay (same settings, LISTEN on) wakes on the commit's notification; measured from sending COMMIT to the consumer's callback. Ceiling: one client publish after the other, measured from the publish call. Producer and consumer share the benchmark process and its clock.`,
    ],
  };
  for (const id of brokerIds) {
    const b = await broker(id);
    const reason = await availability(b);
    if (reason) {
      o.log(`relay · ${b.label}: ${reason}; skipped`);
      unavailableRows(throughput, throughputConfig(b), reason);
      unavailableRows(latencyS, latencyConfig(b, rate), reason);
      continue;
    }
    const version = await b.version();
    throughput.notes.push(`${b.label}: ${version} at ${b.where}.`);
    await alternate(
      o,
      throughput,
      throughputConfig(b),
      (system) => throughputRun(o, b, system, count),
      (m) => `${m.value?.toFixed(0)} events/s`,
    );
    await alternate(
      o,
      latencyS,
      latencyConfig(b, rate),
      (system) => latencyRun(o, b, system, latency),
      (m) => `p50 ${m.extra.p50Ms?.toFixed(2)} ms, p99 ${m.extra.p99Ms?.toFixed(2)} ms`,
    );
  }
  return [throughput, latencyS];
}
