import type pg from 'pg';
import { z } from 'zod';
import { parseConfig, queueName } from './config.js';
import { runSql } from './db.js';
import { createDefaultLogger, type Logger } from './logger.js';
import { resolveMetrics, type MetricsOption, type QueueMetrics } from './metrics.js';
import { jobStatus, type JobStatus } from './schema.js';
import { IntervalService } from './service.js';
import { listSchedules, scheduleRunState, type ScheduleRunState } from './scheduler.js';
import { estimateJobs, sampleJobGauges, type GaugeSampleRow } from './sql/gauges.js';

/** Most queues with series of their own (default of `maxQueues`); the rest are `_other`. */
export const DEFAULT_MAX_GAUGE_QUEUES = 50;
/** The `queue` label of the series that sums the queues beyond `maxQueues`. */
export const OTHER_QUEUE = '_other';
/** Most planner estimates (one `EXPLAIN` each) one refresh asks for; see `countLimit`. */
export const MAX_ESTIMATES_PER_REFRESH = 10;

const jobGaugesOptionsSchema = z.object({
  /** How often the gauges are refreshed (default 15 s: a common scrape interval). */
  intervalMs: z.number().int().min(100).max(3_600_000).default(15_000),
  /**
   * Most index entries one scan of the refresh reads (default 10,000): counts up to it are exact,
   * and a queue and status with more jobs shows the planner's estimate instead.
   */
  countLimit: z.number().int().min(1).max(1_000_000).default(10_000),
  /**
   * Queues always reported, zeros included (a worker passes its own), the first `maxQueues` of
   * them; others as found.
   */
  queues: z.array(queueName).max(1_000).default([]),
  /**
   * Most queues reported with series of their own (default 50), `queues` first, then the ones
   * with the most jobs counted; the jobs counted in the rest are summed into `queue="_other"`.
   */
  maxQueues: z.number().int().min(1).max(200).default(DEFAULT_MAX_GAUGE_QUEUES),
});

export type JobGaugesOptions = z.input<typeof jobGaugesOptionsSchema>;

export interface JobGaugesResult {
  /**
   * Jobs by queue and status, as set on `skiplock_jobs`. `estimated`: not an exact count (its
   * scan stopped at `countLimit`): the planner's estimate, or past MAX_ESTIMATES_PER_REFRESH
   * estimates (and for `_other`) the count reached, a lower bound.
   */
  jobs: { queue: string; status: JobStatus; count: number; estimated: boolean }[];
  /** Seconds, as set on `skiplock_oldest_runnable_age_seconds` (0 when nothing is runnable). */
  oldestRunnableAgeSeconds: Record<string, number>;
  /** Queues found beyond `maxQueues`, summed into `queue="_other"` (0: no such series). */
  otherQueues: number;
  /**
   * Schedules by `scheduleRunState`, as set on `skiplock_schedules` (every state, zeros included);
   * null when the database's schedules table is missing or older than migration 0018.
   */
  schedules: Record<ScheduleRunState, number> | null;
}

export interface JobGauges {
  start(): void;
  stop(): Promise<void>;
  /** Refreshes the gauges now and returns what it set. */
  runOnce(): Promise<JobGaugesResult>;
  readonly metrics: QueueMetrics;
}

const STATUSES: readonly JobStatus[] = jobStatus.enumValues;
const GROUP_STATUSES: Record<Exclude<GaugeSampleRow['grp'], 'oldest'>, readonly JobStatus[]> = {
  claimable: ['pending', 'retryable'],
  processing: ['processing'],
  waiting: ['waiting'],
  completed: ['completed'],
  dead: ['dead'],
  cancelled: ['cancelled'],
};

/**
 * Keeps the `skiplock_jobs{queue,status}` and `skiplock_oldest_runnable_age_seconds{queue}` gauges
 * fresh from one bounded query every `intervalMs` (see `sampleJobGauges`), and
 * `skiplock_schedules{state}` from one read of the schedules table, so a scrape never
 * queries the database and the refresh costs the same at 10 M jobs as at 10 (the schedules
 * read grows with the schedule names recorded and not removed). Run it in one
 * process (the one serving /metrics, say): every copy repeats the same queries, and nothing
 * coordinates them. A worker runs one only with `jobGauges` set.
 *
 * Bounds, per refresh: every scan reads at most `countLimit` index entries; pending and retryable
 * jobs are counted for `queues` and at most `maxQueues` other queues found; at most `maxQueues`
 * queues get series of their own (`queues` first, then the ones with the most jobs counted) and
 * the jobs counted in the rest go to one `queue="_other"` series (its counts are what the bounded
 * scans saw, never estimated; its age the oldest of theirs); at most MAX_ESTIMATES_PER_REFRESH
 * planner estimates are asked for, and a count past them is the capped count (a lower bound).
 *
 * Every queue reported gets all seven statuses (zeros included); a queue no longer reported is
 * removed from the gauges at the next refresh.
 */
export function createJobGauges(
  options: JobGaugesOptions & { pool: pg.Pool; logger?: Logger; metrics?: MetricsOption },
): JobGauges {
  const { pool, logger = createDefaultLogger(), metrics: given, ...rest } = options;
  const config = parseConfig('job gauges options', jobGaugesOptionsSchema, rest);
  const metrics = resolveMetrics(given);
  /** How many queues went to `_other` last time, to log only when it changes. */
  let lastOther = 0;
  const asked = config.queues.filter((q) => q !== OTHER_QUEUE).slice(0, config.maxQueues);

  async function refresh(): Promise<JobGaugesResult> {
    const { rows } = await runSql<GaugeSampleRow>(
      pool,
      sampleJobGauges(asked, config.countLimit, config.maxQueues),
    );
    const found = new Map<string, number>(asked.map((q) => [q, 0]));
    const counts = new Map<string, number>();
    const ages: Record<string, number> = {};
    /** Per scan: how many entries it read (per queue for the claimable one). */
    const scanned = new Map<string, number>();
    for (const row of rows) {
      if (!found.has(row.queue)) found.set(row.queue, 0);
      if (row.grp === 'oldest') {
        ages[row.queue] = Number(row.age_seconds ?? 0);
        continue;
      }
      const n = Number(row.n);
      found.set(row.queue, found.get(row.queue)! + n);
      counts.set(`${row.queue}\0${row.status}`, n);
      const scan = row.grp === 'claimable' ? `claimable\0${row.queue}` : row.grp;
      scanned.set(scan, (scanned.get(scan) ?? 0) + n);
    }
    // One cap on the series, whatever group a queue came from: the ones asked for, then the
    // biggest (by jobs counted; by name among equals).
    const ranked = [...found.keys()]
      .filter((q) => !asked.includes(q) && q !== OTHER_QUEUE)
      .sort((a, b) => found.get(b)! - found.get(a)! || (a < b ? -1 : a > b ? 1 : 0));
    const room = config.maxQueues - asked.length;
    const queues = new Set([...asked, ...ranked.slice(0, room)]);
    // A queue actually named `_other` always goes into the series of that name.
    const rest = [...ranked.slice(room), ...(found.has(OTHER_QUEUE) ? [OTHER_QUEUE] : [])];
    if (rest.length !== lastOther) {
      logger.info(
        { reason: 'gauge_queues_capped', maxQueues: config.maxQueues, other: rest.length },
        `job gauges: ${rest.length} queue(s) beyond maxQueues summed into queue="${OTHER_QUEUE}"`,
      );
      lastOther = rest.length;
    }

    const isCapped = (queue: string, status: JobStatus) => {
      const group = Object.entries(GROUP_STATUSES).find(([, s]) => s.includes(status))![0];
      const scan = group === 'claimable' ? `claimable\0${queue}` : group;
      return (scanned.get(scan) ?? 0) >= config.countLimit;
    };
    const result: JobGaugesResult = {
      jobs: [],
      oldestRunnableAgeSeconds: {},
      otherQueues: 0,
      schedules: await countSchedules(),
    };
    let estimates = 0;
    for (const queue of [...queues].sort()) {
      for (const status of STATUSES) {
        let count = counts.get(`${queue}\0${status}`) ?? 0;
        // The scan stopped at its limit: it saw only part of the rows. The planner's estimate
        // (never below what was counted) stands in for the exact count, for the first
        // MAX_ESTIMATES_PER_REFRESH of them; the rest keep the count reached, a lower bound. The
        // planner never estimates fewer than one row, so a one where none was counted is none.
        const estimated = isCapped(queue, status);
        if (estimated && estimates < MAX_ESTIMATES_PER_REFRESH) {
          estimates += 1;
          const planned = await estimate(queue, status);
          count = count === 0 && planned <= 1 ? 0 : Math.max(count, planned);
        }
        result.jobs.push({ queue, status, count, estimated });
      }
      result.oldestRunnableAgeSeconds[queue] = ages[queue] ?? 0;
    }
    if (rest.length > 0) {
      result.otherQueues = rest.length;
      for (const status of STATUSES) {
        let count = 0;
        let estimated = false;
        for (const queue of rest) {
          count += counts.get(`${queue}\0${status}`) ?? 0;
          estimated ||= isCapped(queue, status);
        }
        result.jobs.push({ queue: OTHER_QUEUE, status, count, estimated });
      }
      result.oldestRunnableAgeSeconds[OTHER_QUEUE] = Math.max(0, ...rest.map((q) => ages[q] ?? 0));
    }
    // Reset, not remove only what this refresher set last time: another one on the registry (a
    // worker stopped before this one was made) may have set queues this one never reports. Reset
    // and sets in one synchronous block, so no scrape sees the gauges empty.
    metrics.jobs.reset();
    metrics.oldestRunnableAge.reset();
    for (const { queue, status, count } of result.jobs) metrics.jobs.set({ queue, status }, count);
    for (const [queue, age] of Object.entries(result.oldestRunnableAgeSeconds)) {
      metrics.oldestRunnableAge.set({ queue }, age);
    }
    metrics.schedules.reset();
    for (const [state, n] of Object.entries(result.schedules ?? {})) {
      metrics.schedules.set({ state }, n);
    }
    metrics.gaugesRefreshed.set(Date.now() / 1000);
    return result;
  }

  /**
   * The schedules by run state: one read of the schedules table, a row per schedule name
   * recorded and not removed (it does not grow with the work). Null, and no series, on a
   * database whose table is missing (42P01) or older than its `seen_at` columns (42703).
   */
  async function countSchedules(): Promise<Record<ScheduleRunState, number> | null> {
    let list;
    try {
      list = await listSchedules(pool);
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code === '42P01' || code === '42703') return null;
      throw error;
    }
    const counts: Record<ScheduleRunState, number> = {
      active: 0,
      paused: 0,
      not_seen: 0,
      unknown: 0,
    };
    for (const s of list) counts[scheduleRunState(s)] += 1;
    return counts;
  }

  async function estimate(queue: string, status: JobStatus): Promise<number> {
    const { rows } = await runSql<{ 'QUERY PLAN': [{ Plan: { 'Plan Rows': number } }] }>(
      pool,
      estimateJobs(queue, status),
    );
    return Math.round(rows[0]?.['QUERY PLAN'][0].Plan['Plan Rows'] ?? 0);
  }

  async function pass(): Promise<JobGaugesResult> {
    try {
      return await refresh();
    } catch (error) {
      metrics.gaugeRefreshFailures.inc();
      throw error;
    }
  }

  const service = new IntervalService('job-gauges', config.intervalMs, pass, logger);
  return {
    start: () => service.start(),
    stop: () => service.stop(),
    runOnce: () => service.runOnce(),
    metrics,
  };
}
