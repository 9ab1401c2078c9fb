import { context, type SpanContext } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';

/**
 * A real OpenTelemetry SDK tracer provider that keeps finished spans in memory, for tests that
 * assert spans. The AsyncLocalStorage context manager is registered globally (as NodeSDK does), so
 * a span made active carries across awaits; the provider itself is not global: tests hand it to
 * the client, worker or runtime as `tracing: { tracerProvider }`.
 */
export function memoryTracing() {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  });
  return {
    tracerProvider,
    tracing: { tracerProvider },
    spans: (): ReadableSpan[] => exporter.getFinishedSpans(),
    reset: () => exporter.reset(),
  };
}

/** A span context as a W3C traceparent value, to compare with a job row's `trace_parent`. */
export const traceparentOf = (sc: SpanContext) =>
  `00-${sc.traceId}-${sc.spanId}-${sc.traceFlags.toString(16).padStart(2, '0')}`;
