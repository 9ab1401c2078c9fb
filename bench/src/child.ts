import {
  diffCounts,
  installQueryCounter,
  snapshotCounts,
  takeClaimLatencies,
} from './query-counter.js';
import type { ChildMessage, ChildReport, ChildTask, ParentMessage } from './protocol.js';
import { runRelayTask } from './relay-child.js';
import { billingInput } from './sagas/billing.js';
import { sagaSystem } from './sagas/index.js';
import { queueSystem } from './systems/index.js';
import { chunks, sharedClockMs, type Payload } from './systems/types.js';

/**
 * One benchmark process: a worker or a producer of one queue system, driven by the parent over
 * IPC so that every system runs in a fresh process with its own CPU and round-trip accounting.
 */
const MAX_LATENCY_SAMPLES = 100_000;
/** Sagas run before the paced ones, numbered from `SAGA_WARMUP_FIRST`. */
const SAGA_WARMUP = 20;
const SAGA_WARMUP_FIRST = 1_000_000;

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
  if (task.role === 'saga') return runSagas(task);
  if (task.role === 'relay' || task.role === 'direct')
    return runRelayTask(task, { send, nextMessage });
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
    // Connected before the clock starts, and closed only after the parent sampled the server.
    const producer = await system.producer(task.url);
    await send({ type: 'ready' });
    await nextMessage('go');
    mark();
    if (task.mode === 'single') {
      for (const p of payloads) await producer.enqueue(p);
    } else {
      for (const part of chunks(payloads, task.chunk)) await producer.enqueueMany(part);
    }
    handled = task.count;
    await send({ type: 'report', report: report() });
    await nextMessage('stop');
    await producer.close();
    return;
  }

  const worker = await system.worker({
    url: task.url,
    concurrency: task.concurrency,
    retention: task.retention,
    onJob: (payload) => {
      handled += 1;
      if (task.latency && latencies.length < MAX_LATENCY_SAMPLES) {
        latencies.push(sharedClockMs() - payload.t);
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

async function runSagas(task: Extract<ChildTask, { role: 'saga' }>): Promise<void> {
  installQueryCounter(() => false);
  const engine = await (await sagaSystem(task.system)).engine(task.url, task.shape);
  const latencies: number[] = [];
  let handled = 0;
  await send({ type: 'ready' });
  await nextMessage('go');
  const cpu = process.cpuUsage();
  const counts = snapshotCounts();
  let warmedUp = 0;
  if (task.mode === 'paced') {
    // Not timed: the first sagas open each engine's connections and prepare its statements (in a
    // probe at 20/s skiplock's first five took 38-67 ms, the steady p50 was 14 ms), as the queue's
    // latency scenario skips its first 20 jobs. Counted in the accounting, which divides by every
    // saga run: the parent's row and transaction counts come from PostgreSQL's statistics, which
    // a backend reports up to 10 s late, so they cannot be cut between warm-up and measurement.
    await Promise.all(
      Array.from({ length: SAGA_WARMUP }, async (_, i) => {
        const { finished } = await engine.start(billingInput(SAGA_WARMUP_FIRST + i));
        await finished;
        warmedUp += 1;
      }),
    );
  }
  const startedAt = performance.now();
  const running = new Set<Promise<void>>();
  const interval = 1000 / task.ratePerSecond;
  for (let n = 0; n < task.count; n++) {
    if (task.mode === 'paced') {
      const wait = startedAt + n * interval - performance.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    }
    while (running.size >= task.inflight) await Promise.race(running);
    const began = performance.now();
    const { finished } = await engine.start(billingInput(n));
    const tracked: Promise<void> = finished.then(() => {
      handled += 1;
      if (latencies.length < MAX_LATENCY_SAMPLES) latencies.push(performance.now() - began);
      running.delete(tracked);
    });
    running.add(tracked);
  }
  await Promise.all(running);
  const used = process.cpuUsage(cpu);
  const report: ChildReport = {
    handled: warmedUp + handled,
    measured: handled,
    elapsedMs: performance.now() - startedAt,
    cpu: { userMs: used.user / 1000, systemMs: used.system / 1000 },
    counts: diffCounts(snapshotCounts(), counts),
    claimLatencies: [],
    latencies,
  };
  // Report while the connections are still open, so the parent samples their backends' CPU.
  await send({ type: 'report', report });
  await nextMessage('stop');
  await engine.close();
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
