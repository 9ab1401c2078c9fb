import type pg from 'pg';
import { z } from 'zod';
import { backoffSchema, parseConfig } from './config.js';
import { runSql, withTransaction } from './db.js';
import type { AnyJobDefinition } from './define.js';
import { createDefaultLogger, type Logger } from './logger.js';
import { Metrics } from './metrics.js';
import { defaultBackoff, type BackoffOptions } from './retry/backoff.js';
import { IntervalService } from './service.js';
import { LockKeys, tryTransactionLock } from './sql/lock.js';
import { sweepExpiredLeases, type SweptRow } from './sql/sweep.js';

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
  /** `stale_recovered_total` counter and `stale_recovered_last` gauge, among others. */
  readonly metrics: Metrics;
}

/**
 * Takes back jobs whose lease expired (their worker died or was cut off). Any number of hosts may
 * run it; a transaction-scoped advisory lock lets one pass run at a time, and the others skip.
 */
export function createSweeper(
  options: SweeperOptions & {
    pool: pg.Pool;
    logger?: Logger;
    metrics?: Metrics;
    /**
     * Job definitions whose own backoff applies to their expired jobs (a worker passes its own).
     * Jobs of other types retry with `backoff`: a sweeper on one host may take back jobs of a
     * type only another host defines.
     */
    jobs?: readonly AnyJobDefinition[];
  },
): Sweeper {
  const {
    pool,
    logger = createDefaultLogger(),
    metrics = new Metrics(),
    jobs = [],
    ...rest
  } = options;
  const config = parseConfig('sweeper options', sweeperOptionsSchema, rest);
  const backoff = { ...defaultBackoff, ...config.backoff };
  const byType = new Map<string, BackoffOptions>(jobs.map((d) => [d.type, d.backoff]));

  async function pass(): Promise<SweepResult> {
    const swept = await withTransaction(pool, async (tx) => {
      const { rows } = await runSql<{ locked: boolean }>(tx, tryTransactionLock(LockKeys.sweep));
      if (!rows[0]?.locked) return null;
      const all: SweptRow[] = [];
      for (let i = 0; i < config.maxBatches; i++) {
        const batch = await runSql<SweptRow>(
          tx,
          sweepExpiredLeases(config.batchSize, backoff, byType),
        );
        all.push(...batch.rows);
        if (batch.rows.length < config.batchSize) break;
      }
      return all;
    });
    if (swept === null) return { ran: false, recovered: 0, retried: 0, dead: 0, jobIds: [] };
    for (const row of swept) {
      logger.warn(
        {
          reason: 'lease_expired',
          jobId: row.id,
          jobType: row.job_type,
          queue: row.queue,
          attempt: row.attempts,
          worker: row.locked_by,
          outcome: row.status === 'dead' ? 'dead' : 'retry',
        },
        'lease expired; job taken back',
      );
    }
    const dead = swept.filter((r) => r.status === 'dead').length;
    metrics.inc('stale_recovered_total', swept.length);
    metrics.inc('stale_dead_total', dead);
    metrics.set('stale_recovered_last', swept.length);
    return {
      ran: true,
      recovered: swept.length,
      retried: swept.length - dead,
      dead,
      jobIds: swept.map((r) => r.id),
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
