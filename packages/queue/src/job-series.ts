import type { JobOutcome, QueueMetrics } from './metrics.js';

interface Observer {
  observe(value: number): void;
}
interface Incrementer {
  inc(): void;
}

/**
 * The per-attempt metrics of one queue and job type, bound to their labels once with prom-client's
 * `labels()`. A drain records three values per job; building a label object for each and having
 * prom-client check it cost about 4 µs of the worker's 28 µs of Node CPU per no-op job (26.9–29.7
 * before, 23.5–25.8 after, 200,000 jobs at concurrency 10, three runs each).
 */
export class JobSeries {
  readonly lag: Observer;
  /** By outcome: the handler-run histogram (made on first use) and a counter per reason. */
  private readonly byOutcome = new Map<
    JobOutcome,
    { duration: Observer | null; reasons: Map<string, Incrementer> }
  >();

  constructor(
    private readonly metrics: QueueMetrics,
    private readonly queue: string,
    private readonly jobType: string,
  ) {
    this.lag = metrics.jobLag.labels({ queue, job_type: jobType });
  }

  /** Counts an attempt that ended with `outcome` for `reason` and observes its handler's run. */
  settled(outcome: JobOutcome, reason: string, durationSeconds: number): void {
    const entry = this.count(outcome, reason);
    entry.duration ??= this.metrics.jobDuration.labels({
      queue: this.queue,
      job_type: this.jobType,
      outcome,
    });
    entry.duration.observe(durationSeconds);
  }

  /** Counts a job handed back unstarted (shutdown): no run to observe. */
  released(reason: string): void {
    this.count('released', reason);
  }

  private count(outcome: JobOutcome, reason: string) {
    let entry = this.byOutcome.get(outcome);
    if (!entry) this.byOutcome.set(outcome, (entry = { duration: null, reasons: new Map() }));
    let counter = entry.reasons.get(reason);
    if (!counter) {
      counter = this.metrics.jobOutcomes.labels({
        queue: this.queue,
        job_type: this.jobType,
        outcome,
        reason,
      });
      entry.reasons.set(reason, counter);
    }
    counter.inc();
    return entry;
  }
}

/**
 * One worker's series, by queue and job type: one entry per pair the worker has run, so it grows
 * only with the label sets prom-client keeps for these metrics anyway.
 */
export class JobSeriesCache {
  private readonly byQueue = new Map<string, Map<string, JobSeries>>();

  constructor(private readonly metrics: QueueMetrics) {}

  of(queue: string, jobType: string): JobSeries {
    let byType = this.byQueue.get(queue);
    if (!byType) this.byQueue.set(queue, (byType = new Map()));
    let series = byType.get(jobType);
    if (!series) byType.set(jobType, (series = new JobSeries(this.metrics, queue, jobType)));
    return series;
  }
}
