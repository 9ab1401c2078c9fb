import {
  SpanKind,
  context,
  isSpanContextValid,
  trace,
  type Attributes,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import { contextOf, inSpan, spanContextOf } from '@skiplock/queue/engine';

/**
 * A saga is one trace. Its start is a span (a child of the caller's span, when there is one) whose
 * context is stored on the saga row. Every job of the saga is a queue job type with
 * `trace: 'continue'`, so each run's `process` span is a child of the `send` span that enqueued
 * it; inside it the saga adds a span per step, compensation or timeout. What happens outside a
 * job (a signal, a cancel, the reconciler, a dead job's hook) is a span under the start span,
 * linked to the caller's span. So the saga's trace holds every step and compensation in order.
 */
export const SAGA_TRACER = '@skiplock/saga';

export interface TracedSaga {
  id: string;
  name: string;
  version: number;
  trace_parent?: string | null | undefined;
  trace_state?: string | null | undefined;
}

const attributesOf = (saga: Omit<TracedSaga, 'trace_parent' | 'trace_state'>): Attributes => ({
  'skiplock.saga.id': saga.id,
  'skiplock.saga.name': saga.name,
  'skiplock.saga.version': saga.version,
});

/** The span of a saga's start: a child of the active context (the caller's span, if any). */
export function startSagaSpan(
  tracer: Tracer,
  saga: Omit<TracedSaga, 'trace_parent' | 'trace_state'>,
): Span {
  const span = tracer.startSpan(`start ${saga.name}`, { kind: SpanKind.INTERNAL });
  if (span.isRecording()) span.setAttributes(attributesOf(saga));
  return span;
}

/**
 * Runs `work` in a span of the saga's own trace (a child of its start span), linked to the span
 * active at the call (a request that sent a signal, a job whose dead hook this is).
 */
export function inSagaTrace<T extends string>(
  tracer: Tracer | null,
  saga: TracedSaga,
  name: string,
  work: () => Promise<T>,
): Promise<T> {
  if (!tracer) return work();
  const start = spanContextOf(saga.trace_parent, saga.trace_state);
  const caller = trace.getSpanContext(context.active());
  const span = tracer.startSpan(
    name,
    {
      kind: SpanKind.INTERNAL,
      ...(caller && isSpanContextValid(caller) ? { links: [{ context: caller }] } : {}),
    },
    contextOf(start),
  );
  if (span.isRecording()) span.setAttributes(attributesOf(saga));
  // What the saga did (a transition: `compensating`, `advanced`...) goes on this span.
  return inSpan(span, work, (done, value) => {
    if (typeof value === 'string') done.setAttribute('skiplock.saga.transition', value);
  });
}

/**
 * Step spans that record: a transition is noted only on one of these, never on a span of the
 * queue's (a dead job's hook runs in its `process` span, after its `dead <step>` span ended).
 */
const stepSpans = new WeakSet<Span>();

/** Runs one step, compensation or timeout job of a saga in a span of its own, under its run. */
export function inStepSpan<T>(
  tracer: Tracer | null,
  saga: { id: string; name: string; version: number },
  what: 'step' | 'compensate' | 'timeout',
  step: string,
  work: () => Promise<T>,
): Promise<T> {
  if (!tracer) return work();
  const span = tracer.startSpan(`${what} ${step}`, { kind: SpanKind.INTERNAL });
  if (span.isRecording()) {
    span.setAttributes({
      ...attributesOf(saga),
      'skiplock.saga.step': step,
      'skiplock.saga.kind': what,
    });
    stepSpans.add(span);
  }
  return inSpan(span, work);
}

/** Notes on the active span, if a step's, what the saga did, e.g. `advanced` or `compensating`. */
export function noteTransition(transition: string): void {
  const span = trace.getActiveSpan();
  if (span && stepSpans.has(span) && span.isRecording()) {
    span.setAttribute('skiplock.saga.transition', transition);
  }
}
