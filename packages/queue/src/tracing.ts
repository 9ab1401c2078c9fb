import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  context,
  createTraceState,
  isSpanContextValid,
  trace,
  type Attributes,
  type Context,
  type Span,
  type SpanContext,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';
import { ConfigError, hasLoggableText, loggableMessage } from './errors.js';

/**
 * OpenTelemetry traces through `@opentelemetry/api` only: with no SDK registered every call below
 * lands on the API's no-op tracer (a span object, no attributes, nothing stored), and
 * `tracing: false` skips even that (`pnpm bench --only tracing` compares the two).
 *
 * Span shapes follow OpenTelemetry's messaging conventions: an enqueue is a `send <queue>`
 * PRODUCER span; running a job is a `process <queue>` CONSUMER span. The producer span's context
 * is stored on the job row in W3C Trace Context form (`trace_parent`, `trace_state`), written here
 * rather than through the registered propagator so that a job carries it whatever propagators an
 * application configures.
 */
export const TRACER_NAME = '@skiplock/queue';

/**
 * Tracing of a client or worker: `true` (default) traces through the global tracer provider (a
 * no-op until an SDK registers one), `{ tracerProvider }` through that provider, `false` never.
 */
export type TracingOption = boolean | { tracerProvider: TracerProvider } | undefined;

/**
 * How a job's run relates to the enqueue that made it. `link` (default): the run starts a trace of
 * its own, linked to the enqueue's span, as the messaging conventions advise for work that runs
 * apart from its producer. `continue`: the run is a child of the enqueue's span, in its trace (a
 * workflow whose steps are jobs, such as a saga, reads as one trace).
 */
export type TraceMode = 'link' | 'continue';

/** The tracer `option` asks for (named `name`), or null for `false`; a ConfigError for junk. */
export function resolveTracer(
  option: TracingOption,
  where: string,
  name = TRACER_NAME,
): Tracer | null {
  if (option === false) return null;
  if (option === true || option === undefined) return trace.getTracer(name);
  const provider = (option as { tracerProvider?: unknown } | null)?.tracerProvider;
  if (typeof (provider as TracerProvider | undefined)?.getTracer !== 'function') {
    throw new ConfigError(
      `${where}: tracing must be true, false or { tracerProvider } with a getTracer method`,
    );
  }
  return (provider as TracerProvider).getTracer(name);
}

/** A span context as stored on a row: W3C `traceparent` and `tracestate` header values. */
export interface StoredTrace {
  parent: string;
  state: string | null;
}

/** The stored form of a span's context, or null when it has none (the no-op tracer's spans). */
export function storedTrace(span: Span): StoredTrace | null {
  const sc = span.spanContext();
  if (!isSpanContextValid(sc)) return null;
  const flags = (sc.traceFlags & 0xff).toString(16).padStart(2, '0');
  return {
    parent: `00-${sc.traceId}-${sc.spanId}-${flags}`,
    state: sc.traceState?.serialize() || null,
  };
}

// version-traceid-spanid-flags; a later version may append fields, version 00 may not.
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^]*)?$/;

/** The span context a stored `traceparent` names, or null when it is absent or malformed. */
export function spanContextOf(
  parent: string | null | undefined,
  state: string | null | undefined,
): SpanContext | null {
  if (!parent) return null;
  const m = TRACEPARENT.exec(parent);
  if (!m || m[1] === 'ff' || (m[1] === '00' && m[5] !== undefined)) return null;
  const sc: SpanContext = {
    traceId: m[2]!,
    spanId: m[3]!,
    traceFlags: Number.parseInt(m[4]!, 16) & 0xff,
    isRemote: true,
    ...(state ? { traceState: createTraceState(state) } : {}),
  };
  return isSpanContextValid(sc) ? sc : null;
}

/**
 * The context a `continue` job's handler runs in when the worker does not trace: the stored
 * span's, so what the handler does stays in the enqueuer's trace (a saga's steps in the saga's).
 * Null for a `link` job or one enqueued untraced.
 */
export function continuedContext(
  mode: TraceMode,
  parent: string | null | undefined,
  state: string | null | undefined,
): Context | null {
  if (mode !== 'continue') return null;
  const stored = spanContextOf(parent, state);
  return stored ? contextOf(stored) : null;
}

/**
 * Calls `start` (which starts a background loop or timer) in the root context: a loop started in
 * its caller's context would run every pass under the span active at start() (an app's boot
 * span) for as long as it runs.
 */
export function detached<T>(start: () => T): T {
  return context.with(ROOT_CONTEXT, start);
}

/** A context whose parent span is the stored one (ROOT_CONTEXT when there is none). */
export function contextOf(stored: SpanContext | null): Context {
  return stored ? trace.setSpanContext(ROOT_CONTEXT, stored) : ROOT_CONTEXT;
}

const SYSTEM = 'skiplock';

/**
 * Starts the producer span of an enqueue of `count` jobs of one type into `queue` (null: a bulk
 * into several queues, which names none), a child of the active context. The attributes go in at
 * creation, where a sampler sees them.
 */
export function startSend(
  tracer: Tracer,
  queue: string | null,
  jobType: string,
  count: number,
): Span {
  const attributes: Attributes = {
    'messaging.system': SYSTEM,
    'messaging.operation.type': 'send',
    'messaging.operation.name': 'send',
    'skiplock.job.type': jobType,
  };
  if (queue !== null) attributes['messaging.destination.name'] = queue;
  if (count !== 1) attributes['messaging.batch.message_count'] = count;
  return tracer.startSpan(queue === null ? 'send' : `send ${queue}`, {
    kind: SpanKind.PRODUCER,
    attributes,
  });
}

/** Runs `work` inside `span` (its active context), then ends the span, recording a failure. */
export async function inSpan<T>(
  span: Span | null,
  work: () => Promise<T>,
  done?: (span: Span, value: T) => void,
): Promise<T> {
  if (!span) return work();
  // A span that neither records nor carries a context (the no-op tracer's, with no parent) would
  // change nothing as the active span: skip the context switch.
  if (!span.isRecording() && !isSpanContextValid(span.spanContext())) return work();
  try {
    const value = await context.with(trace.setSpan(context.active(), span), work);
    if (done && span.isRecording()) done(span, value);
    return value;
  } catch (error) {
    failSpan(span, error);
    throw error;
  } finally {
    span.end();
  }
}

/**
 * Marks a span failed with the error's message; an invalid payload's names its fields only (see
 * `loggableMessage`), and its exception event carries no stack or validator text.
 */
export function failSpan(span: Span, error: unknown): void {
  if (!span.isRecording()) return;
  const message = loggableMessage(error);
  // Not the error itself when its message may quote a value: its message and stack would go.
  span.recordException(
    error instanceof Error && !hasLoggableText(error)
      ? error
      : { name: error instanceof Error ? error.name : 'Error', message },
  );
  span.setStatus({ code: SpanStatusCode.ERROR, message });
}

/** What the consumer span of one job run needs from its row. */
export interface ProcessedJob {
  id: string;
  queue: string;
  type: string;
  attempt: number;
  traceParent: string | null | undefined;
  traceState: string | null | undefined;
}

/**
 * Starts the consumer span of one run of a job and returns it with the context its handler runs
 * in. It links to the enqueue's span; with `continue` it is also that span's child. The context is
 * null when the span neither records nor carries a context (no SDK, a job enqueued untraced): it
 * would change nothing, and not making it saves an allocation per job.
 */
export function startProcess(
  tracer: Tracer,
  job: ProcessedJob,
  mode: TraceMode,
): { span: Span; context: Context | null } {
  const producer = spanContextOf(job.traceParent, job.traceState);
  const parent = mode === 'continue' ? contextOf(producer) : ROOT_CONTEXT;
  const attributes: Attributes = {
    'messaging.system': SYSTEM,
    'messaging.operation.type': 'process',
    'messaging.operation.name': 'process',
    'messaging.destination.name': job.queue,
    'messaging.message.id': job.id,
    'skiplock.job.type': job.type,
    'skiplock.job.attempt': job.attempt,
  };
  const span = tracer.startSpan(
    `process ${job.queue}`,
    {
      kind: SpanKind.CONSUMER,
      attributes,
      ...(producer ? { links: [{ context: producer }] } : {}),
    },
    parent,
  );
  const carries = span.isRecording() || isSpanContextValid(span.spanContext());
  return { span, context: carries ? trace.setSpan(parent, span) : null };
}
