import { Counter, isRegistry, Registry, reuse } from '@skiplock/queue/engine';

/**
 * The saga runtime's Prometheus metrics, registered in a prom-client `Registry`: give the one the
 * worker records into (`createWorker({ metrics })`), and a single scrape covers both. Made once
 * per registry, like the queue's.
 */
export interface SagaMetrics {
  readonly registry: Registry;
  /** Sagas that ended, by definition, the step they ended at, and how they ended. */
  readonly outcomes: Counter<'saga' | 'step' | 'outcome'>;
  /** Stranded sagas the reconciler moved on. */
  readonly reconciled: Counter<string>;
}

/** Where the runtime records: a registry, or anything that carries one (a worker's `metrics`). */
export type SagaMetricsOption = Registry | { readonly registry: Registry };

const made = new WeakMap<Registry, SagaMetrics>();

/** The saga metrics in `registry` (default: a new one of their own, never prom-client's global). */
export function createSagaMetrics(option?: SagaMetricsOption): SagaMetrics {
  const registry =
    option === undefined ? new Registry() : isRegistry(option) ? option : option?.registry;
  if (!isRegistry(registry)) {
    throw new TypeError('createSagaRuntime: `metrics` must be a prom-client Registry');
  }
  const known = made.get(registry);
  // Only while the registry still holds them (not after registry.clear()), as the queue's.
  if (known && registry.getSingleMetric('skiplock_saga_outcomes_total') === known.outcomes) {
    return known;
  }
  const counter = <L extends string>(name: string, help: string, labelNames: L[] = []) =>
    reuse(registry, name, Counter, () => new Counter<L>({ name, help, labelNames, registers: [] }));
  const metrics: SagaMetrics = {
    registry,
    outcomes: counter(
      'skiplock_saga_outcomes_total',
      'Sagas that ended (completed, compensated, cancelled, failed), by definition and the step they ended at.',
      ['saga', 'step', 'outcome'],
    ),
    reconciled: counter(
      'skiplock_sagas_reconciled_total',
      'Stranded sagas (their job dead, cancelled or gone) the reconciler moved on.',
    ),
  };
  made.set(registry, metrics);
  return metrics;
}
