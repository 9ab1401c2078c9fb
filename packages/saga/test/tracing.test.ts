import { SpanKind, SpanStatusCode, context, trace } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { createWorker, NonRetryableError, type Worker } from '@skiplock/queue';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createSagaRuntime, defineSaga, type SagaRuntime } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { memoryTracing } from '../../../test/support/tracing.js';
import { fast, settled, silent } from './fixtures.js';

const db = await useTestDatabase();
const otel = memoryTracing();

const running: { worker: Worker; runtime: SagaRuntime }[] = [];
afterEach(async () => {
  for (const { worker, runtime } of running.splice(0)) {
    await worker.stop({ timeoutMs: 1_000 });
    await runtime.close();
  }
});

async function traced(
  sagas: Parameters<typeof createSagaRuntime>[0]['sagas'],
  workerTracing: false | typeof otel.tracing = otel.tracing,
) {
  const runtime = createSagaRuntime({
    pool: db.pool,
    sagas,
    logger: silent,
    tracing: otel.tracing,
  });
  const worker = createWorker({
    pool: db.pool,
    jobs: runtime.jobs,
    logger: silent,
    concurrency: 2,
    pollIntervalMs: 20,
    sweeper: false,
    retention: false,
    tracing: workerTracing,
  });
  await worker.start();
  running.push({ worker, runtime });
  return runtime;
}

const order = defineSaga({
  name: 'traced-order',
  version: 1,
  input: z.object({ fail: z.boolean() }),
})
  .step('reserve', { ...fast, run: () => ({ held: 1 }), compensate: () => {} })
  .step('charge', {
    ...fast,
    run: (ctx) => {
      if (ctx.input.fail) throw new NonRetryableError('card declined');
      return { charged: true };
    },
  });

const approval = defineSaga({ name: 'traced-approval', version: 1, input: z.object({}) })
  .step('request', { ...fast, run: () => 1, compensate: () => {} })
  .waitFor('approved', { signal: 'approval', payload: z.object({ by: z.string() }) })
  .step('apply', { ...fast, run: () => 2 });

const sagaSpans = (id: string) =>
  otel.spans().filter((s) => s.attributes['skiplock.saga.id'] === id);
const parentOf = (span: ReadableSpan) =>
  otel.spans().find((s) => s.spanContext().spanId === span.parentSpanContext?.spanId);

describe('OpenTelemetry traces of a saga', () => {
  it('a saga that compensates is one trace: start, each step and the compensation as spans', async () => {
    otel.reset();
    const runtime = await traced([order]);
    const request = otel.tracerProvider.getTracer('test').startSpan('POST /orders');
    await context.with(trace.setSpan(context.active(), request), () =>
      runtime.start(order, { id: 'traced-1', input: { fail: true } }),
    );
    request.end();
    expect((await settled(runtime, 'traced-1')).status).toBe('compensated');
    // The compensation's span ends after the saga row says compensated; wait for it.
    const spans = await waitForSpans('traced-1', ['compensate reserve']);

    const traceId = request.spanContext().traceId;
    const names = spans.map((s) => s.name);
    expect(names).toEqual(
      expect.arrayContaining([
        'start traced-order',
        'step reserve',
        'step charge',
        'compensate reserve',
      ]),
    );
    for (const span of spans) expect(span.spanContext().traceId).toBe(traceId);
    const byName = (n: string) => spans.find((s) => s.name === n)!;
    expect(byName('start traced-order').parentSpanContext?.spanId).toBe(
      request.spanContext().spanId,
    );
    // The start is a local operation; the message it sends has a producer span of its own.
    expect(byName('start traced-order').kind).toBe(SpanKind.INTERNAL);
    const firstSend = parentOf(parentOf(byName('step reserve'))!)!;
    expect(firstSend.kind).toBe(SpanKind.PRODUCER);
    expect(parentOf(firstSend)?.name).toBe('start traced-order');
    // Each step runs under its job's consumer span, which continues the enqueue's trace.
    for (const step of ['step reserve', 'step charge', 'compensate reserve']) {
      const run = parentOf(byName(step))!;
      expect(run.name).toBe('process sagas');
      expect(run.spanContext().traceId).toBe(traceId);
      expect(parentOf(run)?.name).toBe('send sagas');
    }
    expect(byName('step charge').status).toEqual({
      code: SpanStatusCode.ERROR,
      message: 'card declined',
    });
    expect(byName('step reserve').attributes).toMatchObject({
      'skiplock.saga.name': 'traced-order',
      'skiplock.saga.step': 'reserve',
      'skiplock.saga.kind': 'step',
      'skiplock.saga.transition': 'advanced',
    });
    expect(byName('compensate reserve').attributes['skiplock.saga.transition']).toBe('compensated');
    // The failed step's job died; its hook's span says what the saga did then.
    expect(byName('dead charge').attributes['skiplock.saga.transition']).toBe('compensating');
    // The compensation began after the failed step ended.
    const at = (t: [number, number]) => t[0] * 1e9 + t[1];
    expect(at(byName('compensate reserve').startTime)).toBeGreaterThanOrEqual(
      at(byName('step charge').endTime),
    );
  });

  it("a dead job's transition is on the saga's dead span, not on the queue's process span", async () => {
    otel.reset();
    const broken = defineSaga({ name: 'traced-broken', version: 1, input: z.object({}) })
      .step('hold', {
        ...fast,
        run: () => 1,
        compensate: () => {
          throw new NonRetryableError('release API is down');
        },
      })
      .step('pay', {
        ...fast,
        run: () => {
          throw new NonRetryableError('no');
        },
      });
    const runtime = await traced([broken]);
    await runtime.start(broken, { id: 'traced-5', input: {} });
    expect((await settled(runtime, 'traced-5')).status).toBe('failed');
    // The step's job died (the saga compensates), then the compensation's (the saga failed).
    const spans = await waitForSpans('traced-5', ['dead pay', 'dead hold']);
    const byName = (n: string) => spans.find((s) => s.name === n)!;
    expect(byName('dead pay').attributes['skiplock.saga.transition']).toBe('compensating');
    expect(byName('dead hold').attributes['skiplock.saga.transition']).toBe('failed');
    const traceId = byName('start traced-broken').spanContext().traceId;
    // Hold's, pay's and hold's compensation's runs; the last ends after its job's dead hook.
    const runs = await waitFor(() => {
      const found = otel
        .spans()
        .filter((s) => s.name === 'process sagas' && s.spanContext().traceId === traceId);
      return found.length === 3 ? found : null;
    });
    for (const run of runs) expect(run.attributes['skiplock.saga.transition']).toBeUndefined();
  });

  it('a signal from another trace resumes the saga in its own trace, linked to the sender', async () => {
    otel.reset();
    const runtime = await traced([approval]);
    await runtime.start(approval, { id: 'traced-2', input: {} });
    await settled(runtime, 'traced-2', ['waiting']);
    const webhook = otel.tracerProvider.getTracer('test').startSpan('POST /approvals');
    await context.with(trace.setSpan(context.active(), webhook), () =>
      runtime.signal('traced-2', 'approval', { by: 'ann' }),
    );
    webhook.end();
    expect((await settled(runtime, 'traced-2')).status).toBe('completed');
    const spans = await waitForSpans('traced-2', ['step apply']);
    const start = spans.find((s) => s.name === 'start traced-approval')!;
    const signal = spans.find((s) => s.name === 'signal approval')!;
    expect(signal.parentSpanContext?.spanId).toBe(start.spanContext().spanId);
    expect(signal.links.map((l) => l.context.spanId)).toEqual([webhook.spanContext().spanId]);
    expect(webhook.spanContext().traceId).not.toBe(start.spanContext().traceId);
    for (const span of spans) {
      expect(span.spanContext().traceId).toBe(start.spanContext().traceId);
    }
    expect(spans.map((s) => s.name)).toEqual(
      expect.arrayContaining(['step request', 'step approved', 'step apply']),
    );
  });

  it('with an untraced worker the steps still join the saga trace, with no process spans', async () => {
    otel.reset();
    const runtime = await traced([order], false);
    await runtime.start(order, { id: 'traced-4', input: { fail: false } });
    expect((await settled(runtime, 'traced-4')).status).toBe('completed');
    const spans = await waitForSpans('traced-4', ['step reserve', 'step charge']);
    const start = spans.find((s) => s.name === 'start traced-order')!;
    for (const span of spans) {
      expect(span.spanContext().traceId).toBe(start.spanContext().traceId);
    }
    expect(otel.spans().filter((s) => s.name.startsWith('process'))).toEqual([]);
    // Each step is a child of the send span that enqueued its job.
    expect(parentOf(spans.find((s) => s.name === 'step charge')!)?.name).toBe('send sagas');
  });

  it('a cancel is a span of the saga trace, and the compensation it starts follows it', async () => {
    otel.reset();
    const runtime = await traced([approval]);
    await runtime.start(approval, { id: 'traced-3', input: {} });
    await settled(runtime, 'traced-3', ['waiting']);
    expect((await runtime.cancel('traced-3')).accepted).toBe(true);
    expect((await settled(runtime, 'traced-3')).status).toBe('cancelled');
    const spans = await waitForSpans('traced-3', ['cancel', 'compensate request']);
    const start = spans.find((s) => s.name === 'start traced-approval')!;
    const cancel = spans.find((s) => s.name === 'cancel')!;
    expect(cancel.parentSpanContext?.spanId).toBe(start.spanContext().spanId);
    // cancel -> send (the compensation's job) -> process -> compensate request
    const compensate = spans.find((s) => s.name === 'compensate request')!;
    expect(parentOf(parentOf(parentOf(compensate)!)!)?.spanContext().spanId).toBe(
      cancel.spanContext().spanId,
    );
  });
});

async function waitForSpans(id: string, names: string[]): Promise<ReadableSpan[]> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const spans = sagaSpans(id);
    if (names.every((n) => spans.some((s) => s.name === n))) return spans;
    if (Date.now() > deadline) {
      throw new Error(`spans ${names.join(', ')} not seen; have ${spans.map((s) => s.name)}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}
