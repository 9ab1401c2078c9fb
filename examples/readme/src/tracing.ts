// A saga traced with OpenTelemetry: the top README's tracing snippet, as a complete program.
// Run: DATABASE_URL=postgres://... npx tsx tracing.ts
import { setTimeout as sleep } from 'node:timers/promises';
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import pg from 'pg';
import { z } from 'zod';
import { createWorker, NonRetryableError } from '@skiplock/queue';
import { createSagaRuntime, defineSaga, migrate } from '@skiplock/saga';

// What an SDK set-up (NodeSDK, say) does at start: a context manager and a tracer provider,
// registered globally. skiplock depends on @opentelemetry/api only and traces through them.
const spans = new InMemorySpanExporter(); // in production: an OTLP exporter
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
trace.setGlobalTracerProvider(
  new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }),
);

const order = defineSaga({ name: 'order', version: 1, input: z.object({ cents: z.number() }) })
  .step('reserve', { run: () => ({ held: true }), compensate: () => {} })
  .step('charge', {
    run: (_ctx, input) => {
      if (input.cents > 100_000) throw new NonRetryableError('card declined');
      return { charged: input.cents };
    },
  });

const pool = new pg.Pool({ connectionString: process.env['DATABASE_URL'] });
await migrate({ pool });
const sagas = createSagaRuntime({ pool, sagas: [order] });
const worker = createWorker({ pool, jobs: sagas.jobs });
await worker.start();

// Started inside a request's span, the saga's trace is the request's.
const tracer = trace.getTracer('shop');
await tracer.startActiveSpan('POST /orders', async (request) => {
  await sagas.start(order, { id: 'ord_1', input: { cents: 250_000 } });
  request.end();
});

// A real worker runs until SIGTERM; this program waits for the saga to finish, then stops.
let view = await sagas.getSaga('ord_1');
for (let i = 0; i < 300 && view?.status !== 'compensated'; i++) {
  await sleep(100);
  view = await sagas.getSaga('ord_1');
}
await worker.stop();
await sagas.close();
await pool.end();

// The trace, as a tree: every span of the saga under the request's.
const finished = spans.getFinishedSpans();
const childrenOf = (parent: string | undefined) =>
  finished
    .filter((s) => s.parentSpanContext?.spanId === parent)
    .sort((a, b) => a.startTime[0] - b.startTime[0] || a.startTime[1] - b.startTime[1]);
function print(span: ReadableSpan, depth: number) {
  const error = span.status.message ? ` (${span.status.message})` : '';
  console.log(`${'  '.repeat(depth)}${span.name}${error}`);
  for (const child of childrenOf(span.spanContext().spanId)) print(child, depth + 1);
}
for (const root of childrenOf(undefined)) print(root, 0);
const traces = new Set(finished.map((s) => s.spanContext().traceId));
console.log(`saga ord_1: ${view?.status}; ${finished.length} spans in ${traces.size} trace`);
// Fewer spans means skiplock traced into another copy of @opentelemetry/api than the SDK's.
if (view?.status !== 'compensated' || traces.size !== 1 || finished.length < 12) process.exit(1);
