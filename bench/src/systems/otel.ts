import { context, type TracerProvider } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-base';

let provider: TracerProvider | null = null;

/**
 * An OpenTelemetry SDK as an application would run it (every span sampled, a batch processor),
 * exporting to nowhere: the cost measured is skiplock's spans and the SDK's, not a collector's.
 * The context manager is registered only in the process that traces (a bench child), never in
 * the bench's own process, whose other systems must run with no SDK at all.
 */
export function benchTracerProvider(globalContext: boolean): TracerProvider {
  if (globalContext)
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  const discard: SpanExporter = {
    export: (_spans, done) => done({ code: 0 }),
    shutdown: async () => {},
  };
  provider ??= new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(discard)] });
  return provider;
}
