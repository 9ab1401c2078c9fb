import {
  diffCounts,
  installQueryCounter,
  snapshotCounts,
  takeClaimLatencies,
} from './query-counter.js';
import type { ChildMessage, ChildReport, ChildTask, ParentMessage } from './protocol.js';
import { queueSystem } from './systems/index.js';
import { wallClockMs, type Payload } from './systems/types.js';

/**
 * One benchmark process: a worker or a producer of one queue system, driven by the parent over
 * IPC so that every system runs in a fresh process with its own CPU and round-trip accounting.
 */
const MAX_LATENCY_SAMPLES = 100_000;

function send(message: ChildMessage): Promise<void> {
  return new Promise((resolve) => {
    if (!process.send) return resolve();
    process.send(message, undefined, undefined, () => resolve());
  });
}

// Every message is kept until asked for, so none is lost between two awaits.
const inbox: ParentMessage['type'][] = [];
const waiters = new Map<ParentMessage['type'], () => void>();

function onParentMessage(message: ParentMessage): void {
  const waiter = waiters.get(message.type);
  if (waiter) {
    waiters.delete(message.type);
    waiter();
  } else {
    inbox.push(message.type);
  }
}

function nextMessage(type: ParentMessage['type']): Promise<void> {
  const at = inbox.indexOf(type);
  if (at >= 0) {
    inbox.splice(at, 1);
    return Promise.resolve();
  }
  return new Promise((resolve) => waiters.set(type, resolve));
}

async function withTimeout(work: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    work.catch(() => {}),
    new Promise((resolve) => {
      timer = setTimeout(resolve, ms);
    }),
  ]);
  clearTimeout(timer);
}

async function main(task: ChildTask): Promise<void> {
  const system = await queueSystem(task.system);
  installQueryCounter(system.isClaim);
  let handled = 0;
  const latencies: number[] = [];
  const start = { cpu: process.cpuUsage(), counts: snapshotCounts(), at: performance.now() };
  const report = (): ChildReport => {
    const cpu = process.cpuUsage(start.cpu);
    return {
      handled,
      elapsedMs: performance.now() - start.at,
      cpu: { userMs: cpu.user / 1000, systemMs: cpu.system / 1000 },
      counts: diffCounts(snapshotCounts(), start.counts),
      claimLatencies: takeClaimLatencies(),
      latencies,
    };
  };
  const mark = () => {
    start.cpu = process.cpuUsage();
    start.counts = snapshotCounts();
    start.at = performance.now();
    takeClaimLatencies();
  };

  if (task.role === 'enqueue') {
    const payloads: Payload[] = Array.from({ length: task.count }, (_, i) => ({ i, t: 0 }));
    const producer = task.mode === 'single' ? await system.producer(task.url) : null;
    await send({ type: 'ready' });
    await nextMessage('go');
    mark();
    if (producer) {
      for (const p of payloads) await producer.enqueue(p);
    } else {
      await system.enqueueBulk(task.url, payloads, task.chunk);
    }
    handled = task.count;
    const done = report();
    await producer?.close();
    await send({ type: 'report', report: done });
    return;
  }

  const worker = await system.worker({
    url: task.url,
    concurrency: task.concurrency,
    retention: task.retention,
    onJob: (payload) => {
      handled += 1;
      if (task.latency && latencies.length < MAX_LATENCY_SAMPLES) {
        latencies.push(wallClockMs() - payload.t);
      }
    },
  });
  await send({ type: 'ready' });
  await nextMessage('go');
  mark();
  await worker.go();
  let reported = -1;
  const progress = setInterval(() => {
    if (handled !== reported) void send({ type: 'progress', handled });
    reported = handled;
  }, 25);
  await nextMessage('report');
  clearInterval(progress);
  await send({ type: 'report', report: report() });
  await nextMessage('stop');
  await withTimeout(worker.stop(), 3_000);
}

process.once('message', (task: ChildTask) => {
  process.on('message', onParentMessage);
  main(task)
    .then(() => process.exit(0))
    .catch(async (error: unknown) => {
      const text = error instanceof Error ? (error.stack ?? error.message) : String(error);
      await send({ type: 'failed', error: text });
      process.exit(1);
    });
});
