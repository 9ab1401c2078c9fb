import type pg from 'pg';
import { z } from 'zod';
import { parseConfig, rejectUnknownKeys } from './config.js';
import { runSql, withTransaction } from './db.js';
import { createDefaultLogger, type Logger } from './logger.js';
import { resolveMetrics, type MetricsOption, type QueueMetrics } from './metrics.js';
import { IntervalService } from './service.js';
import { LockKeys, tryTransactionLock } from './sql/lock.js';
import { pruneJobs } from './sql/retention.js';

const DAY_MS = 86_400_000;

/** About a century: beyond it `now() - age` leaves PostgreSQL's timestamp range for some ages. */
const MAX_AGE_MS = 100 * 365 * DAY_MS;

const retentionOptionsSchema = z.object({
  /**
   * Completed and cancelled jobs are deleted this long after they finished (a run stopped by
   * `cancelJob(id, { running: true })` not before it has ended: its row holds its key's slot).
   */
  completedAgeMs: z
    .number()
    .int()
    .min(0)
    .max(MAX_AGE_MS)
    .default(7 * DAY_MS),
  /** Dead jobs stay longer, so an operator can inspect and retry them. */
  deadAgeMs: z
    .number()
    .int()
    .min(0)
    .max(MAX_AGE_MS)
    .default(30 * DAY_MS),
  intervalMs: z.number().int().min(100).max(86_400_000).default(60_000),
  batchSize: z.number().int().min(1).max(50_000).default(1_000),
  maxBatches: z.number().int().min(1).max(1_000).default(10),
});

export type RetentionOptions = z.input<typeof retentionOptionsSchema>;

export interface RetentionResult {
  ran: boolean;
  deleted: number;
  byStatus: Record<string, number>;
}

export interface Retention {
  start(): void;
  stop(): Promise<void>;
  runOnce(): Promise<RetentionResult>;
  readonly metrics: QueueMetrics;
}

/**
 * Deletes finished jobs after their retention age so the hot table stays small under churn. Each
 * batch is its own short transaction (row locks and WAL stay small), and an advisory lock per batch
 * keeps hosts from pruning the same rows at once.
 */
export function createRetention(
  options: RetentionOptions & { pool: pg.Pool; logger?: Logger; metrics?: MetricsOption },
): Retention {
  rejectUnknownKeys('retention options', options, [
    ...Object.keys(retentionOptionsSchema.shape),
    'pool',
    'logger',
    'metrics',
  ]);
  const { pool, logger = createDefaultLogger(), metrics: given, ...rest } = options;
  const metrics = resolveMetrics(given);
  const config = parseConfig('retention options', retentionOptionsSchema, rest);

  async function pass(): Promise<RetentionResult> {
    const byStatus: Record<string, number> = {};
    let deleted = 0;
    let ran = false;
    for (let i = 0; i < config.maxBatches; i++) {
      const rows = await withTransaction(pool, async (tx) => {
        const lock = await runSql<{ locked: boolean }>(tx, tryTransactionLock(LockKeys.retention));
        if (!lock.rows[0]?.locked) return null;
        return (
          await runSql<{ status: string }>(tx, pruneJobs({ ...config, limit: config.batchSize }))
        ).rows;
      });
      if (rows === null) break;
      ran = true;
      for (const r of rows) byStatus[r.status] = (byStatus[r.status] ?? 0) + 1;
      deleted += rows.length;
      if (rows.length < config.batchSize) break;
    }
    if (deleted > 0) {
      metrics.pruned.inc(deleted);
      logger.info({ reason: 'retention_pruned', deleted, byStatus }, 'pruned finished jobs');
    }
    return { ran, deleted, byStatus };
  }

  const service = new IntervalService('retention', config.intervalMs, pass, logger);
  return {
    start: () => service.start(),
    stop: () => service.stop(),
    runOnce: () => service.runOnce(),
    metrics,
  };
}
