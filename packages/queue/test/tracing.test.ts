import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  context,
  createTraceState,
  trace,
} from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  ConfigError,
  createClient,
  createWorker,
  defineJob,
  defineSchedule,
} from '../src/index.js';
import { spanContextOf } from '../src/tracing.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { memoryTracing, traceparentOf } from '../../../test/support/tracing.js';
import { waitFor } from '../../../test/support/wait.js';
import { fastBackoff, quiet, testWorker } from './fixtures.js';

const db = await useTestDatabase();
const otel = memoryTracing();
const client = createClient({ pool: db.pool, logger: quiet, tracing: otel.tracing });

async function traceColumns(id: string) {
  const { rows } = await db.pool.query<{ trace_parent: string | null; trace_state: string | null }>(
    'SELECT trace_parent, trace_state FROM skiplock.jobs WHERE id = $1',
    [id],
  );
  return rows[0]!;
}

const byName = (name: string) => otel.spans().filter((s) => s.name === name);

describe('OpenTelemetry traces', () => {
  it('an enqueue is a producer span whose context is stored on the job', async () => {
    otel.reset();
    const def = defineJob({
      type: 'trace-send',
      queue: 'trace-send',
      payload: z.object({ n: z.number() }),
      handler: () => {},
    });
    const { id } = await client.enqueue(def, { n: 1 });
    const [send] = byName('send trace-send');
    expect(send).toBeDefined();
    expect(send!.kind).toBe(SpanKind.PRODUCER);
    expect(send!.attributes).toMatchObject({
      'messaging.system': 'skiplock',
      'messaging.operation.type': 'send',
      'messaging.destination.name': 'trace-send',
      'messaging.message.id': id,
      'skiplock.job.type': 'trace-send',
    });
    // No payload field in any attribute.
    expect(JSON.stringify(send!.attributes)).not.toContain('"n"');
    expect((await traceColumns(id)).trace_parent).toBe(traceparentOf(send!.spanContext()));
  });

  it("an enqueue inside the caller's span is that span's child, tracestate kept", async () => {
    otel.reset();
    const def = defineJob({
      type: 'trace-nested',
      queue: 'trace-nested',
      payload: z.object({}),
      handler: () => {},
    });
    // The caller's span came in from another service, with a vendor's tracestate.
    const incoming = trace.setSpanContext(ROOT_CONTEXT, {
      traceId: '0af7651916cd43dd8448eb211c80319c',
      spanId: 'b7ad6b7169203331',
      traceFlags: 1,
      isRemote: true,
      traceState: createTraceState('vendor=abc'),
    });
    const request = otel.tracerProvider.getTracer('test').startSpan('http request', {}, incoming);
    const { id } = await context.with(trace.setSpan(incoming, request), () =>
      client.enqueue(def, {}),
    );
    request.end();
    const [send] = byName('send trace-nested');
    expect(send!.parentSpanContext?.spanId).toBe(request.spanContext().spanId);
    expect(send!.spanContext().traceId).toBe(request.spanContext().traceId);
    expect(send!.spanContext().traceId).toBe('0af7651916cd43dd8448eb211c80319c');
    expect(await traceColumns(id)).toEqual({
      trace_parent: traceparentOf(send!.spanContext()),
      trace_state: 'vendor=abc',
    });
    // The run's link carries the tracestate back.
    const worker = testWorker(db.pool, [def], { queues: ['trace-nested'], tracing: otel.tracing });
    expect(await worker.runOnce()).toBe(1);
    const [processed] = byName('process trace-nested');
    expect(processed!.links[0]!.context.traceState?.get('vendor')).toBe('abc');
    await worker.stop();
  });

  it('a run is a consumer span in a new trace linked to the enqueue, with its outcome', async () => {
    otel.reset();
    const def = defineJob({
      type: 'trace-run',
      queue: 'trace-run',
      payload: z.object({}),
      handler: () => {},
    });
    const { id } = await client.enqueue(def, {});
    const worker = testWorker(db.pool, [def], { queues: ['trace-run'], tracing: otel.tracing });
    expect(await worker.runOnce()).toBe(1);
    const [send] = byName('send trace-run');
    const [processed] = byName('process trace-run');
    expect(processed).toBeDefined();
    expect(processed!.kind).toBe(SpanKind.CONSUMER);
    expect(processed!.parentSpanContext).toBeUndefined();
    expect(processed!.spanContext().traceId).not.toBe(send!.spanContext().traceId);
    expect(processed!.links.map((l) => l.context.spanId)).toEqual([send!.spanContext().spanId]);
    expect(processed!.attributes).toMatchObject({
      'messaging.operation.type': 'process',
      'messaging.destination.name': 'trace-run',
      'messaging.message.id': id,
      'skiplock.job.type': 'trace-run',
      'skiplock.job.attempt': 1,
      'skiplock.job.outcome': 'completed',
    });
    expect(processed!.status.code).not.toBe(SpanStatusCode.ERROR);
    await worker.stop();
  });

  it("`trace: 'continue'` runs the job as the enqueue's child; its own enqueues nest under it", async () => {
    otel.reset();
    const second = defineJob({
      type: 'trace-second',
      queue: 'trace-chain',
      trace: 'continue',
      payload: z.object({}),
      handler: () => {},
    });
    const first = defineJob({
      type: 'trace-first',
      queue: 'trace-chain',
      trace: 'continue',
      payload: z.object({}),
      handler: async () => {
        await client.enqueue(second, {});
      },
    });
    await client.enqueue(first, {});
    const worker = testWorker(db.pool, [first, second], {
      queues: ['trace-chain'],
      tracing: otel.tracing,
    });
    expect(await worker.runOnce()).toBe(1);
    expect(await worker.runOnce()).toBe(1);
    const sends = byName('send trace-chain');
    const runs = byName('process trace-chain');
    expect(sends).toHaveLength(2);
    expect(runs).toHaveLength(2);
    const traceId = sends[0]!.spanContext().traceId;
    for (const span of [...sends, ...runs]) expect(span.spanContext().traceId).toBe(traceId);
    const runOf = (type: string) => runs.find((r) => r.attributes['skiplock.job.type'] === type)!;
    const sendOf = (type: string) => sends.find((s) => s.attributes['skiplock.job.type'] === type)!;
    // send(first) -> process(first) -> send(second) -> process(second)
    expect(runOf('trace-first').parentSpanContext?.spanId).toBe(
      sendOf('trace-first').spanContext().spanId,
    );
    expect(sendOf('trace-second').parentSpanContext?.spanId).toBe(
      runOf('trace-first').spanContext().spanId,
    );
    expect(runOf('trace-second').parentSpanContext?.spanId).toBe(
      sendOf('trace-second').spanContext().spanId,
    );
    await worker.stop();
  });

  it("a buffered job started as another job's slot frees runs in its own context, not in that job's", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let quick = 0;
    const seen: (string | undefined)[] = [];
    const activeTrace = () => trace.getSpanContext(context.active())?.traceId;
    // Runs in its enqueue's trace (`continue`), waiting on the gate.
    const chained = defineJob({
      type: 'slot-chained',
      queue: 'slot-context',
      trace: 'continue',
      payload: z.object({}),
      handler: async () => {
        seen.push(activeTrace());
        await gate;
      },
    });
    // A `link` job of a worker that does not trace: it runs in no trace at all.
    const plain = defineJob({
      type: 'slot-plain',
      queue: 'slot-context',
      payload: z.object({ quick: z.boolean() }),
      handler: (p) => {
        if (p.quick) quick += 1;
        else seen.push(activeTrace());
      },
    });
    const worker = createWorker({
      pool: db.pool,
      jobs: [chained, plain],
      logger: quiet,
      queues: ['slot-context'],
      tracing: false,
      concurrency: 1,
      listen: false,
      sweeper: false,
      retention: false,
      pollIntervalMs: 20,
    });
    await worker.start();
    try {
      // Quick handlers first, so the worker claims beyond its one slot and buffers the next job.
      await client.enqueueMany(
        plain,
        Array.from({ length: 20 }, () => ({ payload: { quick: true } })),
      );
      await waitFor(() => quick === 20);
      const sent = await client.enqueue(chained, {});
      const stored = spanContextOf((await traceColumns(sent.id)).trace_parent, null);
      await waitFor(() => seen.length === 1);
      await client.enqueue(plain, { quick: false });
      await waitFor(() => worker.inFlight === 2);
      // The chained job ends; its freed slot starts the buffered one from its continuation.
      release();
      await waitFor(() => seen.length === 2);
      expect(seen).toEqual([stored!.traceId, undefined]);
    } finally {
      release();
      await worker.stop();
    }
  });

  it('background loops do not run in the context start() was called in', async () => {
    otel.reset();
    const app = otel.tracerProvider.getTracer('app');
    const tick = defineJob({
      type: 'loop-tick',
      queue: 'loop-context',
      payload: z.object({ at: z.string() }),
      handler: () => {},
    });
    // A job of a worker that does not trace: its handler's own span has only the loop's context.
    const work = defineJob({
      type: 'loop-work',
      queue: 'loop-work',
      payload: z.object({}),
      handler: () => app.startSpan('handler work').end(),
    });
    const everySecond = defineSchedule({
      name: 'loop-context',
      cron: '* * * * * *',
      job: tick,
      payload: (t) => ({ at: t.toISOString() }),
    });
    const scheduling = testWorker(db.pool, [tick], {
      queues: ['loop-context'],
      schedules: [everySecond],
      scheduler: { intervalMs: 200 },
      tracing: otel.tracing,
    });
    const untraced = testWorker(db.pool, [work], {
      queues: ['loop-work'],
      pollIntervalMs: 20,
      tracing: false,
    });
    // Started during an application's start-up, inside its span.
    const boot = await app.startActiveSpan('app boot', async (span) => {
      await scheduling.start();
      await untraced.start();
      span.end();
      return span.spanContext();
    });
    try {
      const send = await waitFor(() => byName('send loop-context')[0], { what: 'a tick' });
      await client.enqueue(work, {});
      const handled = await waitFor(() => byName('handler work')[0], { what: 'the handler' });
      expect(send.parentSpanContext?.spanId).not.toBe(boot.spanId);
      expect(send.spanContext().traceId).not.toBe(boot.traceId);
      expect(handled.parentSpanContext?.spanId).not.toBe(boot.spanId);
      expect(handled.spanContext().traceId).not.toBe(boot.traceId);
    } finally {
      await scheduling.stop();
      await untraced.stop();
    }
  });

  it('a failed attempt marks its span failed with the reason; the retry is a span of its own', async () => {
    otel.reset();
    let calls = 0;
    const def = defineJob({
      type: 'trace-fail',
      queue: 'trace-fail',
      backoff: fastBackoff,
      payload: z.object({}),
      handler: () => {
        calls += 1;
        if (calls === 1) throw new Error('card declined');
      },
    });
    await client.enqueue(def, {});
    const worker = testWorker(db.pool, [def], { queues: ['trace-fail'], tracing: otel.tracing });
    expect(await worker.runOnce()).toBe(1);
    await new Promise((r) => setTimeout(r, 30));
    expect(await worker.runOnce()).toBe(1);
    const runs = byName('process trace-fail');
    expect(runs.map((r) => r.attributes['skiplock.job.outcome'])).toEqual(['retried', 'completed']);
    expect(runs[0]!.status).toEqual({ code: SpanStatusCode.ERROR, message: 'card declined' });
    expect(runs[0]!.events.map((e) => e.name)).toContain('exception');
    expect(runs[0]!.attributes['skiplock.job.reason']).toBe('error');
    expect(runs[1]!.attributes['skiplock.job.attempt']).toBe(2);
    // Both attempts link to the one enqueue.
    const sendId = byName('send trace-fail')[0]!.spanContext().spanId;
    for (const run of runs) expect(run.links[0]!.context.spanId).toBe(sendId);
    await worker.stop();
  });

  it('a job that admission leases to the worker (a rate-limited start) links to its enqueue', async () => {
    otel.reset();
    const def = defineJob({
      type: 'trace-rated',
      queue: 'trace-rated',
      payload: z.object({ n: z.number() }),
      rateLimit: { limit: 100, intervalMs: 1_000 },
      handler: () => {},
    });
    await client.enqueue(def, { n: 1 });
    const worker = testWorker(db.pool, [def], {
      queues: ['trace-rated'],
      tracing: otel.tracing,
      listen: true,
    });
    await worker.start();
    const processed = await waitFor(() => byName('process trace-rated')[0], {
      what: 'the rate-limited run',
    });
    await worker.stop();
    const [send] = byName('send trace-rated');
    expect(processed.links.map((l) => l.context.spanId)).toEqual([send!.spanContext().spanId]);
    expect(processed.attributes['skiplock.job.outcome']).toBe('completed');
  });

  it('a bulk enqueue is one producer span with the batch size; every job carries it', async () => {
    otel.reset();
    const def = defineJob({
      type: 'trace-bulk',
      queue: 'trace-bulk',
      payload: z.object({ n: z.number() }),
      handler: () => {},
    });
    const uniform = await client.enqueueMany(def, [{ payload: { n: 1 } }, { payload: { n: 2 } }]);
    const keyed = await client.enqueueMany(def, [
      { payload: { n: 3 }, idempotencyKey: 'trace-bulk-3' },
      { payload: { n: 4 }, priority: 5 },
    ]);
    const sends = byName('send trace-bulk');
    expect(sends).toHaveLength(2);
    for (const [i, ids] of [uniform, keyed].entries()) {
      expect(sends[i]!.attributes['messaging.batch.message_count']).toBe(2);
      const parent = traceparentOf(sends[i]!.spanContext());
      for (const { id } of ids) expect((await traceColumns(id)).trace_parent).toBe(parent);
    }
  });

  it('with no SDK registered nothing is stored, and tracing: false makes no span at all', async () => {
    otel.reset();
    const def = defineJob({
      type: 'trace-off',
      queue: 'trace-off',
      payload: z.object({}),
      handler: () => {},
    });
    // The global provider is the API's no-op one: this test file never registers a provider.
    const untraced = createClient({ pool: db.pool, logger: quiet });
    const { id } = await untraced.enqueue(def, {});
    expect(await traceColumns(id)).toEqual({ trace_parent: null, trace_state: null });
    const worker = testWorker(db.pool, [def], { queues: ['trace-off'] });
    expect(await worker.runOnce()).toBe(1);
    await worker.stop();
    // Now an SDK is registered globally: the defaults record, `tracing: false` still does not.
    trace.setGlobalTracerProvider(otel.tracerProvider);
    try {
      const traced = createClient({ pool: db.pool, logger: quiet });
      const off = createClient({ pool: db.pool, logger: quiet, tracing: false });
      const recorded = await traced.enqueue(def, {});
      expect((await traceColumns(recorded.id)).trace_parent).toMatch(/^00-/);
      expect(byName('send trace-off')).toHaveLength(1);
      otel.reset();
      const second = await off.enqueue(def, {});
      expect(await traceColumns(second.id)).toEqual({ trace_parent: null, trace_state: null });
      const offWorker = testWorker(db.pool, [def], { queues: ['trace-off'], tracing: false });
      expect(await offWorker.runOnce()).toBe(2);
      await offWorker.stop();
      expect(otel.spans()).toEqual([]);
    } finally {
      trace.disable();
    }
  });

  it('a debounced enqueue stores its own context on the job it replaces', async () => {
    otel.reset();
    const def = defineJob({
      type: 'trace-debounce',
      queue: 'trace-debounce',
      payload: z.object({ n: z.number() }),
      singletonKey: () => 'one',
      singletonMode: 'replace',
      handler: () => {},
    });
    const first = await client.enqueue(def, { n: 1 }, { delayMs: 60_000 });
    const second = await client.enqueue(def, { n: 2 }, { delayMs: 60_000 });
    expect(second.id).toBe(first.id);
    const sends = byName('send trace-debounce');
    expect(sends).toHaveLength(2);
    expect((await traceColumns(first.id)).trace_parent).toBe(
      traceparentOf(sends[1]!.spanContext()),
    );
  });

  it('a bulk with options per job, into two queues, is one span named send with no destination', async () => {
    otel.reset();
    const def = defineJob({
      type: 'trace-mixed',
      queue: 'trace-mixed-a',
      payload: z.object({ n: z.number() }),
      handler: () => {},
    });
    const ids = await client.enqueueMany(def, [
      { payload: { n: 1 }, priority: 3 },
      { payload: { n: 2 }, queue: 'trace-mixed-b' },
    ]);
    const [send] = byName('send');
    expect(send!.attributes['messaging.destination.name']).toBeUndefined();
    expect(send!.attributes['messaging.batch.message_count']).toBe(2);
    for (const { id } of ids) {
      expect((await traceColumns(id)).trace_parent).toBe(traceparentOf(send!.spanContext()));
    }
  });

  it('an enqueue that fails marks its span failed', async () => {
    otel.reset();
    const def = defineJob({
      type: 'trace-broken',
      queue: 'trace-broken',
      payload: z.object({}),
      handler: () => {},
    });
    const tx = await db.pool.connect();
    try {
      await tx.query('BEGIN');
      await tx.query('SELECT 1/0').catch(() => {});
      await expect(client.enqueue(def, {}, { tx })).rejects.toThrow(/aborted/);
      await tx.query('ROLLBACK');
    } finally {
      tx.release();
    }
    const [send] = byName('send trace-broken');
    expect(send!.status.code).toBe(SpanStatusCode.ERROR);
    expect(send!.status.message).toMatch(/aborted/);
  });

  it('a stored traceparent reads back; a malformed one reads as no context', () => {
    const traceId = '0af7651916cd43dd8448eb211c80319c';
    const spanId = 'b7ad6b7169203331';
    const read = spanContextOf(`00-${traceId}-${spanId}-01`, 'a=b,c=d');
    expect(read).toMatchObject({ traceId, spanId, traceFlags: 1, isRemote: true });
    expect(read!.traceState!.serialize()).toBe('a=b,c=d');
    // A later version may append fields; version 00 may not, and ff is invalid.
    expect(spanContextOf(`01-${traceId}-${spanId}-00-later`, null)).toMatchObject({ spanId });
    for (const bad of [
      null,
      '',
      'garbage',
      `00-${traceId}-${spanId}-01-more`,
      `ff-${traceId}-${spanId}-01`,
      `00-${'0'.repeat(32)}-${spanId}-01`,
      `00-${traceId}-${'0'.repeat(16)}-01`,
      `00-${traceId.toUpperCase()}-${spanId}-01`,
    ]) {
      expect(spanContextOf(bad, null)).toBeNull();
    }
  });

  it('a malformed tracing option is refused by name', () => {
    expect(() => createClient({ pool: db.pool, tracing: { tracerProvider: {} } as never })).toThrow(
      ConfigError,
    );
    expect(() =>
      createWorker({
        pool: db.pool,
        jobs: [defineJob({ type: 'trace-bad', payload: z.object({}), handler: () => {} })],
        tracing: 'yes' as never,
        logger: quiet,
      }),
    ).toThrow(/worker options: tracing must be true, false or \{ tracerProvider \}/);
  });
});
