import { createRelay, type OutboxMessage, type Sink } from '@skiplock/outbox';
import { pino } from 'pino';
import { broker } from './brokers/index.js';
import { benchEvent, WARMUP_TOPIC } from './brokers/types.js';
import type { ChildMessage, ChildReport, ChildTask, ParentMessage } from './protocol.js';
import {
  diffCounts,
  installQueryCounter,
  snapshotCounts,
  takeClaimLatencies,
} from './query-counter.js';

export type RelayTask = Extract<ChildTask, { role: 'relay' | 'direct' }>;

export interface ChildIo {
  send(message: ChildMessage): Promise<void>;
  nextMessage(type: ParentMessage['type']): Promise<void>;
}

const logger = pino({ level: 'warn' });

/** The relay's claim statement, for claim latency. */
export const isRelayClaim = (text: string): boolean =>
  text.includes('WITH picked AS') && text.includes('skiplock.outbox_messages');

/** A message to a topic nothing takes: it opens the sink's connection and stores nothing. */
const warmup: OutboxMessage = {
  id: '0',
  topic: WARMUP_TOPIC,
  key: null,
  payload: {},
  headers: {},
  attempt: 1,
  createdAt: new Date(),
};

/**
 * One relay benchmark process: the outbox relay with the outbox's own sink, or the broker's client
 * publishing the same messages in windows of the relay's batch size, as many windows at once as
 * the relay has lanes, and no database. Both report the time of each batch (handed to the broker
 * until every message in it was acknowledged) in `latencies`. The parent's clock runs on its
 * consumer, not on these reports.
 */
export async function runRelayTask(task: RelayTask, io: ChildIo): Promise<void> {
  // The relay sends through pg.Pool.query: its claims and settles are timed to their results.
  installQueryCounter(isRelayClaim);
  const target = await broker(task.broker);
  const batchMs: number[] = [];
  let handled = 0;
  const start = { cpu: process.cpuUsage(), counts: snapshotCounts(), at: performance.now() };
  const mark = () => {
    start.cpu = process.cpuUsage();
    start.counts = snapshotCounts();
    start.at = performance.now();
    takeClaimLatencies();
  };
  const report = (): ChildReport => {
    const cpu = process.cpuUsage(start.cpu);
    return {
      handled,
      elapsedMs: performance.now() - start.at,
      cpu: { userMs: cpu.user / 1000, systemMs: cpu.system / 1000 },
      counts: diffCounts(snapshotCounts(), start.counts),
      claimLatencies: takeClaimLatencies(),
      latencies: batchMs,
    };
  };

  if (task.role === 'direct') {
    const publisher = await target.publisher(task.tag);
    // Opens the connection (and the client's reply subscription) before the clock.
    await publisher.publish([{ ...benchEvent(0, 1), topic: WARMUP_TOPIC }]).catch(() => {});
    const events = Array.from({ length: task.count }, (_, i) => benchEvent(i, task.keys));
    await io.send({ type: 'ready' });
    await io.nextMessage('go');
    mark();
    let next = 0;
    const lane = async () => {
      while (next < events.length) {
        const window = events.slice(next, next + task.batchSize);
        next += window.length;
        const began = performance.now();
        await publisher.publish(window);
        batchMs.push(performance.now() - began);
        handled += window.length;
      }
    };
    await Promise.all(Array.from({ length: task.concurrency }, lane));
    await io.send({ type: 'report', report: report() });
    await io.nextMessage('stop');
    await publisher.close();
    return;
  }

  if (!task.url) throw new Error('the relay needs the run database');
  const sink = target.sink(task.tag);
  const timed: Sink = {
    name: sink.name,
    async deliver(messages, signal) {
      const began = performance.now();
      const deliveries = await sink.deliver(messages, signal);
      batchMs.push(performance.now() - began);
      handled += deliveries.filter((d) => d.ok).length;
      return deliveries;
    },
    close: () => sink.close(),
  };
  const relay = createRelay({
    connectionString: task.url,
    sink: timed,
    batchSize: task.batchSize,
    concurrency: task.concurrency,
    logger,
  });
  // The sink's connection and the pool's first connection open before the clock, as the queue
  // benchmark's workers open theirs; the parent fills the outbox only after this.
  await sink.deliver([warmup], AbortSignal.timeout(10_000));
  await relay.runOnce();
  await io.send({ type: 'ready' });
  await io.nextMessage('go');
  mark();
  relay.start();
  await io.nextMessage('report');
  await io.send({ type: 'report', report: report() });
  await io.nextMessage('stop');
  await relay.stop({ timeoutMs: 3_000 });
  await sink.close();
}
