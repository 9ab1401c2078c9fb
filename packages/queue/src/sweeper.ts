import type pg from 'pg';
import { z } from 'zod';
import { backoffSchema, parseConfig, rejectUnknownKeys } from './config.js';
import { runSql, withTransaction } from './db.js';
import type { AnyJobDefinition, DeadJobInfo } from './define.js';
import { createDefaultLogger, type Logger } from './logger.js';
import { resolveMetrics, type MetricsOption, type QueueMetrics } from './metrics.js';
import { failureRecord, markDead } from './dead.js';
import { errorMessage } from './errors.js';
import { OTHER_QUEUE } from './gauges.js';
import { backoffWith } from './retry/backoff.js';
import { decideFailure, type FailureDecision } from './retry/policy.js';
import { IntervalService } from './service.js';
import { LockKeys, tryTransactionLock } from './sql/lock.js';
import {
  failExpiredJobs,
  noteDeadHookFailure,
  selectExpiredLeases,
  type ExpiredFailure,
  type ExpiredRow,
} from './sql/sweep.js';

export interface SweepResult {
  /** False when another host held the sweep lock, so this pass did nothing. */
  ran: boolean;
  recovered: number;
  retried: number;
  dead: number;
  jobIds: string[];
}

const sweeperOptionsSchema = z.object({
  intervalMs: z.number().int().min(100).max(3_600_000).default(15_000),
  batchSize: z.number().int().min(1).max(10_000).default(500),
  maxBatches: z.number().int().min(1).max(1_000).default(20),
  backoff: backoffSchema.default({}),
});

export type SweeperOptions = z.input<typeof sweeperOptionsSchema>;

export interface Sweeper {
  start(): void;
  stop(): Promise<void>;
  runOnce(): Promise<SweepResult>;
  /** Counts `skiplock_lease_expiries_recovered_total` and `skiplock_dead_hook_failures_total`. */
  readonly metrics: QueueMetrics;
}

/**
 * Takes back jobs whose lease expired (their worker died or was cut off). Any number of hosts may
 * run it; a transaction-scoped advisory lock lets one pass run at a time, and the others skip.
 *
 * An expired lease is a failed attempt with reason `lease_expired`, and it goes through the same
 * decision as a handler's failure (`decideFailure`): retried with the job type's backoff, or dead
 * once its attempts are spent. A job that goes dead here runs its type's `onDead` hook in the
 * transaction that kills it, as it would on its worker, when this process defines the type
 * (`jobs`); a hook that throws leaves that job processing for the next pass to try again.
 */
export function createSweeper(
  options: SweeperOptions & {
    pool: pg.Pool;
    logger?: Logger;
    /** A prom-client `Registry` (default: one of its own), or a worker's `metrics`. */
    metrics?: MetricsOption;
    /**
     * Job definitions whose retry policy, backoff and `onDead` hook apply to their expired jobs (a
     * worker passes its own). Jobs of other types retry with `backoff` and go dead without a hook:
     * a sweeper on one host may take back jobs of a type only another host defines.
     */
    jobs?: readonly AnyJobDefinition[];
  },
): Sweeper {
  rejectUnknownKeys('sweeper options', options, [
    ...Object.keys(sweeperOptionsSchema.shape),
    'pool',
    'logger',
    'metrics',
    'jobs',
  ]);
  const { pool, logger = createDefaultLogger(), metrics: given, jobs = [], ...rest } = options;
  const metrics = resolveMetrics(given);
  const config = parseConfig('sweeper options', sweeperOptionsSchema, rest);
  const backoff = backoffWith(config.backoff);
  const definitions = new Map(jobs.map((d) => [d.type, d]));
  const series = new SeriesCap(logger);

  interface Swept {
    row: ExpiredRow;
    decision: FailureDecision;
  }

  /** Settles one batch of expired jobs in `tx`; returns the ones it settled. */
  async function settle(tx: pg.PoolClient, rows: ExpiredRow[], held: string[]) {
    const plain: (Swept & { failure: ExpiredFailure })[] = [];
    const hooked: (Swept & { failure: ExpiredFailure; info: DeadJobInfo })[] = [];
    for (const row of rows) {
      const definition = definitions.get(row.job_type);
      const decision = decideFailure({
        attempt: row.attempts,
        maxAttempts: row.max_attempts,
        reason: 'lease_expired',
        error: null,
        backoff: definition?.backoff ?? backoff,
      });
      const message = `lease expired: worker ${row.locked_by ?? '?'} stopped heartbeating`;
      const { status, delayMs } = failureRecord(decision, message);
      const swept = { row, decision, failure: { id: row.id, status, delayMs, message } };
      if (decision.kind === 'retry' || !definition?.onDead) {
        plain.push(swept);
        continue;
      }
      hooked.push({
        ...swept,
        info: {
          id: row.id,
          type: row.job_type,
          queue: row.queue,
          attempt: row.attempts,
          maxAttempts: row.max_attempts,
          priority: row.priority,
          idempotencyKey: row.idempotency_key,
          reason: decision.reason,
          error: message,
        },
      });
    }
    const settled: Swept[] = [];
    if (plain.length > 0) {
      await runSql(tx, failExpiredJobs(plain.map((s) => s.failure)));
      settled.push(...plain);
    }
    for (const swept of hooked) {
      const { row, failure, info } = swept;
      // A savepoint per hook: one that throws undoes its own job's kill, not the whole pass.
      await tx.query('SAVEPOINT skiplock_on_dead');
      try {
        await markDead(tx, failExpiredJobs([failure]), definitions.get(row.job_type), info);
        await tx.query('RELEASE SAVEPOINT skiplock_on_dead');
        settled.push(swept);
      } catch (error) {
        await tx.query('ROLLBACK TO SAVEPOINT skiplock_on_dead');
        await runSql(
          tx,
          noteDeadHookFailure(
            row.id,
            `onDead hook failed (${errorMessage(error)}); the job stays processing and the sweeper tries the hook again each pass (retry or cancel it to end that)`,
          ),
        );
        held.push(row.id);
        metrics.deadHookFailures.inc();
        logger.error(
          {
            reason: 'dead_hook_failed',
            jobId: row.id,
            jobType: row.job_type,
            queue: row.queue,
            attempt: row.attempts,
            err: errorMessage(error),
          },
          'onDead hook failed; the job stays processing until the next sweep',
        );
      }
    }
    return settled;
  }

  async function pass(): Promise<SweepResult> {
    const swept = await withTransaction(pool, async (tx) => {
      const { rows } = await runSql<{ locked: boolean }>(tx, tryTransactionLock(LockKeys.sweep));
      if (!rows[0]?.locked) return null;
      const all: Swept[] = [];
      // Jobs whose hook failed in this pass: still locked by it, so the next batch must skip them.
      const held: string[] = [];
      for (let i = 0; i < config.maxBatches; i++) {
        const batch = await runSql<ExpiredRow>(tx, selectExpiredLeases(config.batchSize, held));
        all.push(...(await settle(tx, batch.rows, held)));
        if (batch.rows.length < config.batchSize) break;
      }
      return all;
    });
    if (swept === null) return { ran: false, recovered: 0, retried: 0, dead: 0, jobIds: [] };
    for (const { row, decision } of swept) {
      logger.warn(
        {
          reason: 'lease_expired',
          jobId: row.id,
          jobType: row.job_type,
          queue: row.queue,
          attempt: row.attempts,
          worker: row.locked_by,
          outcome: decision.kind,
          ...(decision.kind === 'retry' ? { delayMs: decision.delayMs } : {}),
        },
        'lease expired; job taken back',
      );
    }
    const dead = swept.filter((s) => s.decision.kind === 'dead').length;
    for (const { row, decision } of swept) {
      metrics.leaseExpiriesRecovered.inc({
        ...series.labels(row.queue, row.job_type),
        outcome: decision.kind === 'retry' ? 'retried' : 'dead',
      });
    }
    return {
      ran: true,
      recovered: swept.length,
      retried: swept.length - dead,
      dead,
      jobIds: swept.map((s) => s.row.id),
    };
  }

  const service = new IntervalService('sweeper', config.intervalMs, pass, logger);
  return {
    start: () => service.start(),
    stop: () => service.stop(),
    runOnce: () => service.runOnce(),
    metrics,
  };
}

/** Queue and job type pairs the sweeper counts with labels of their own; the rest are `_other`. */
export const MAX_SWEEPER_SERIES = 100;

/**
 * The labels of a recovered job's series. The sweeper takes back jobs of any queue and type in
 * the table, not only its worker's: a queue per tenant made a series per tenant in every
 * process's registry, without bound (noted in an audit). The first MAX_SWEEPER_SERIES pairs seen
 * keep their names; later ones count as `queue="_other", job_type="_other"`, as the job gauges do
 * past `maxQueues`, logged once as `sweeper_series_capped`.
 */
class SeriesCap {
  private readonly seen = new Set<string>();
  private capped = false;

  constructor(private readonly logger: Logger) {}

  labels(queue: string, jobType: string): { queue: string; job_type: string } {
    const key = JSON.stringify([queue, jobType]);
    if (this.seen.has(key)) return { queue, job_type: jobType };
    if (this.seen.size < MAX_SWEEPER_SERIES) {
      this.seen.add(key);
      return { queue, job_type: jobType };
    }
    if (!this.capped) {
      this.capped = true;
      this.logger.warn(
        { reason: 'sweeper_series_capped', maxSeries: MAX_SWEEPER_SERIES },
        `lease expiries: queue and job type pairs beyond ${MAX_SWEEPER_SERIES} counted as queue="${OTHER_QUEUE}"`,
      );
    }
    return { queue: OTHER_QUEUE, job_type: OTHER_QUEUE };
  }
}
