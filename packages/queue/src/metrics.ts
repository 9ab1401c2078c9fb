import { Counter, Gauge, Histogram, Registry, type Metric } from 'prom-client';
import { ConfigError } from './errors.js';

/**
 * The queue's Prometheus metrics, registered in one prom-client `Registry`. Every worker, sweeper,
 * admitter, scheduler and retention service given the same registry records into the same
 * objects (they are made once per registry), so one scrape of it covers the whole process.
 *
 * Units are base units (seconds); labels are bounded: queue, job type, outcome, reason code and
 * schedule name, never a job id or key. The README's Metrics section lists every one.
 */
export interface QueueMetrics {
  readonly registry: Registry;
  /** From when a job became runnable (its `run_at`) to its handler's start. */
  readonly jobLag: Histogram<'queue' | 'job_type'>;
  /** A handler's run, by how its attempt ended. */
  readonly jobDuration: Histogram<'queue' | 'job_type' | 'outcome'>;
  /** The claim statement's round trip, as the worker sees it. */
  readonly claimDuration: Histogram<string>;
  /** Jobs per claim, empty claims included. */
  readonly claimBatchSize: Histogram<string>;
  readonly jobOutcomes: Counter<'queue' | 'job_type' | 'outcome' | 'reason'>;
  readonly leaseExpiriesRecovered: Counter<'queue' | 'job_type' | 'outcome'>;
  readonly claimErrors: Counter<string>;
  readonly settleFailures: Counter<string>;
  readonly handedOff: Counter<string>;
  readonly deadHookFailures: Counter<string>;
  readonly admitted: Counter<string>;
  readonly admittedLeased: Counter<string>;
  readonly admitFailures: Counter<string>;
  readonly pruned: Counter<string>;
  readonly scheduleTicksEnqueued: Counter<'schedule'>;
  readonly scheduleFailures: Counter<'schedule'>;
  /** Jobs by queue and status, from the periodic bounded query (see `createJobGauges`). */
  readonly jobs: Gauge<'queue' | 'status'>;
  readonly oldestRunnableAge: Gauge<'queue'>;
  /** Schedules by `scheduleRunState`, from the same refresh. */
  readonly schedules: Gauge<'state'>;
  readonly gaugesRefreshed: Gauge<string>;
  readonly gaugeRefreshFailures: Counter<string>;
}

/** How an attempt ended, the `outcome` label of the job metrics. */
export type JobOutcome = 'completed' | 'retried' | 'dead' | 'lock_lost' | 'released';

/** Where metrics go: a prom-client `Registry`, or metrics already made on one. */
export type MetricsOption = Registry | QueueMetrics;

// Lag spans a few milliseconds (a warm worker) to an hour (a backlog); runs span 1 ms to 5 min.
const LAG_BUCKETS = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
];
const DURATION_BUCKETS = [
  0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
];
const CLAIM_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
const BATCH_BUCKETS = [0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];

const made = new WeakMap<Registry, QueueMetrics>();

/**
 * The queue's metrics in `registry` (default: a new registry of their own; never prom-client's
 * global one). Made once per registry: a second call with the same registry returns the same
 * object, so a worker and a separate sweeper can share it (made again once `registry.clear()`
 * dropped them).
 */
export function createQueueMetrics(registry: Registry = new Registry()): QueueMetrics {
  const known = made.get(registry);
  // Only while the registry still holds them: after registry.clear() they would record into
  // metrics no scrape reads.
  if (known && registry.getSingleMetric('skiplock_job_outcomes_total') === known.jobOutcomes) {
    return known;
  }
  const counter = <L extends string>(name: string, help: string, labelNames: L[] = []) =>
    reuse(registry, name, Counter, () => new Counter<L>({ name, help, labelNames, registers: [] }));
  const histogram = <L extends string>(
    name: string,
    help: string,
    buckets: number[],
    labelNames: L[] = [],
  ) =>
    reuse(
      registry,
      name,
      Histogram,
      () => new Histogram<L>({ name, help, buckets, labelNames, registers: [] }),
    );
  const gauge = <L extends string>(name: string, help: string, labelNames: L[] = []) =>
    reuse(registry, name, Gauge, () => new Gauge<L>({ name, help, labelNames, registers: [] }));
  const metrics: QueueMetrics = {
    registry,
    jobLag: histogram(
      'skiplock_job_lag_seconds',
      'Seconds from when a job became runnable (its run_at) to the start of its handler.',
      LAG_BUCKETS,
      ['queue', 'job_type'],
    ),
    jobDuration: histogram(
      'skiplock_job_duration_seconds',
      "Seconds a job's handler ran, by how the attempt ended.",
      DURATION_BUCKETS,
      ['queue', 'job_type', 'outcome'],
    ),
    claimDuration: histogram(
      'skiplock_claim_duration_seconds',
      'Seconds the claim statement took, round trip included.',
      CLAIM_BUCKETS,
    ),
    claimBatchSize: histogram(
      'skiplock_claim_batch_size',
      'Jobs taken by one claim statement (0 for a claim that found none).',
      BATCH_BUCKETS,
    ),
    jobOutcomes: counter(
      'skiplock_job_outcomes_total',
      'Attempts settled by this process, by outcome and reason code.',
      ['queue', 'job_type', 'outcome', 'reason'],
    ),
    leaseExpiriesRecovered: counter(
      'skiplock_lease_expiries_recovered_total',
      'Jobs whose lease expired, taken back by the sweeper (retried or dead).',
      ['queue', 'job_type', 'outcome'],
    ),
    claimErrors: counter('skiplock_claim_errors_total', 'Claim statements that failed.'),
    settleFailures: counter(
      'skiplock_settle_failures_total',
      'Settles not written after every retry; the job is left to the sweeper.',
    ),
    handedOff: counter(
      'skiplock_jobs_handed_off_total',
      'Jobs inserted already leased to this worker by the job before them (a saga step).',
    ),
    deadHookFailures: counter(
      'skiplock_dead_hook_failures_total',
      'onDead hooks that threw in the sweeper; the job is tried again next pass.',
    ),
    admitted: counter(
      'skiplock_jobs_admitted_total',
      'Waiting jobs admitted into a slot of their concurrency key.',
    ),
    admittedLeased: counter(
      'skiplock_jobs_admitted_leased_total',
      'Admitted jobs leased to this worker by the admission itself.',
    ),
    admitFailures: counter('skiplock_admit_failures_total', 'Admission passes that failed.'),
    pruned: counter('skiplock_jobs_pruned_total', 'Finished jobs deleted by retention.'),
    scheduleTicksEnqueued: counter(
      'skiplock_schedule_ticks_enqueued_total',
      'Jobs enqueued for cron schedule ticks.',
      ['schedule'],
    ),
    scheduleFailures: counter(
      'skiplock_schedule_failures_total',
      'Schedule passes that failed (bad payload, database); the ticks stay due.',
      ['schedule'],
    ),
    jobs: gauge(
      'skiplock_jobs',
      'Jobs by queue and status from the periodic bounded query: exact up to its count limit, the planner estimate above it.',
      ['queue', 'status'],
    ),
    oldestRunnableAge: gauge(
      'skiplock_oldest_runnable_age_seconds',
      'Age of the oldest runnable (pending or retryable, run_at passed) job of the queue; 0 when none.',
      ['queue'],
    ),
    schedules: gauge(
      'skiplock_schedules',
      'Recorded cron schedules by state: paused, active, not_seen (no scheduler running the recorded definition seen for twice its on-time window), unknown (never marked seen).',
      ['state'],
    ),
    gaugesRefreshed: gauge(
      'skiplock_gauges_refreshed_timestamp_seconds',
      'Unix time of the last successful refresh of skiplock_jobs, skiplock_oldest_runnable_age_seconds and skiplock_schedules.',
    ),
    gaugeRefreshFailures: counter(
      'skiplock_gauge_refresh_failures_total',
      'Refreshes of the job gauges that failed.',
    ),
  };
  made.set(registry, metrics);
  return metrics;
}

/** The metrics an option names: its own, the ones of a given registry, or a new registry's. */
export function resolveMetrics(option: MetricsOption | undefined): QueueMetrics {
  if (option === undefined) return createQueueMetrics();
  if (isQueueMetrics(option)) return option;
  if (isRegistry(option)) return createQueueMetrics(option);
  throw new ConfigError('invalid options: metrics: give a prom-client Registry');
}

function isQueueMetrics(value: unknown): value is QueueMetrics {
  return (
    typeof value === 'object' && value !== null && 'jobOutcomes' in value && 'registry' in value
  );
}

/** A prom-client registry, also one of another copy of prom-client (so no `instanceof`). */
export function isRegistry(value: unknown): value is Registry {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as Registry).registerMetric === 'function' &&
    typeof (value as Registry).getSingleMetric === 'function' &&
    typeof (value as Registry).metrics === 'function'
  );
}

/**
 * The metric `name` of `registry`: the one already there (made by an earlier call on this
 * registry, or by a package built on the queue), else a new one registered now. A metric of
 * another kind under the name is a configuration error, not something to overwrite.
 */
export function reuse<M extends Metric>(
  registry: Registry,
  name: string,
  kind: abstract new (...args: never[]) => M,
  make: () => M,
): M {
  const existing = registry.getSingleMetric(name);
  if (existing) {
    if (existing instanceof kind) return existing;
    throw new ConfigError(
      `metrics: the registry already has a metric "${name}" that is not a ${kind.name}`,
    );
  }
  const metric = make();
  registry.registerMetric(metric);
  return metric;
}
