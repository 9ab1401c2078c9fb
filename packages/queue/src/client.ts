import type pg from 'pg';
import { z } from 'zod';
import { parseConfig, queueName, rejectUnknownKeys, DEFAULT_MAX_PAYLOAD_BYTES } from './config.js';
import { runSql, type Queryable } from './db.js';
import { payloadIssues, type JobDefinition, type AnyJobDefinition } from './define.js';
import { InvalidPayloadError, PayloadTooLargeError, SkiplockError } from './errors.js';
import { createDefaultLogger, type Logger } from './logger.js';
import { resolvePool, type PoolSource } from './pool.js';
import type { JobStatus } from './schema.js';
import {
  cancelJob,
  retryJob,
  selectJob,
  selectJobs,
  selectQueueStats,
  type QueueStatsRow,
} from './sql/admin.js';
import { findJobsByKeys, insertJobs, type InsertedRow, type JobRow } from './sql/enqueue.js';

export interface EnqueueOptions {
  queue?: string;
  priority?: number;
  /** Absolute time to run at. Prefer `delayMs`, which is measured in the database's clock. */
  runAt?: Date;
  delayMs?: number;
  /** Unique per queue: a second enqueue with the same key inserts nothing and returns the first id. */
  idempotencyKey?: string;
  maxAttempts?: number;
}

export interface TransactionOption {
  /** Join this transaction (a pg client inside BEGIN, or a drizzle transaction). */
  tx?: Queryable;
}

export interface EnqueueResult {
  id: string;
  /** False when a job with the same idempotency key already existed; `id` is then that job's. */
  inserted: boolean;
}

export interface BulkItem<P> extends EnqueueOptions {
  payload: P;
}

export interface Job {
  id: string;
  queue: string;
  jobType: string;
  payload: unknown;
  idempotencyKey: string | null;
  status: JobStatus;
  priority: number;
  attempts: number;
  maxAttempts: number;
  runAt: Date;
  lockedAt: Date | null;
  lockedBy: string | null;
  leaseExpiresAt: Date | null;
  leaseMs: number;
  timeoutMs: number | null;
  lastError: string | null;
  errors: { attempt: number; reason: string; message: string; at: string }[];
  completedAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
}

export interface QueueStats {
  queue: string;
  status: JobStatus;
  count: number;
  oldestRunnableAgeMs: number | null;
  /** Processing jobs whose lease has passed: the sweeper has not taken them back yet. */
  expiredLeases: number;
  /** Jobs that went dead in the last hour (by their last update). */
  deadLastHour: number;
}

export interface ClientOptions extends PoolSource {
  logger?: Logger;
  /** Largest serialized payload accepted, in bytes (default 256 KiB). */
  maxPayloadBytes?: number;
  /** Most jobs one bulk enqueue accepts (default 10,000); bounds statement size and memory. */
  maxBulkSize?: number;
}

const enqueueOptionsSchema = z
  .object({
    queue: queueName.optional(),
    priority: z.number().int().min(-1_000_000).max(1_000_000).optional(),
    runAt: z.date().optional(),
    delayMs: z
      .number()
      .int()
      .min(0)
      .max(10 * 365 * 86_400_000)
      .optional(),
    idempotencyKey: z.string().min(1).max(512).optional(),
    maxAttempts: z.number().int().min(1).max(1_000).optional(),
  })
  .strict();

const clientOptionsSchema = z
  .object({
    maxPayloadBytes: z
      .number()
      .int()
      .min(1)
      .max(64 * 1024 * 1024)
      .optional(),
    maxBulkSize: z.number().int().min(1).max(100_000).optional(),
  })
  .passthrough();

export interface Client {
  readonly pool: pg.Pool;
  enqueue<S extends z.ZodType>(
    definition: JobDefinition<S>,
    payload: z.input<S>,
    options?: EnqueueOptions & TransactionOption,
  ): Promise<EnqueueResult>;
  /** Enqueues many jobs of one type in a single statement; results are in input order. */
  enqueueMany<S extends z.ZodType>(
    definition: JobDefinition<S>,
    items: readonly BulkItem<z.input<S>>[],
    options?: TransactionOption,
  ): Promise<EnqueueResult[]>;
  getJob(id: string, options?: TransactionOption): Promise<Job | null>;
  listJobs(filter?: {
    statuses?: JobStatus[];
    queue?: string;
    jobType?: string;
    limit?: number;
    beforeId?: string;
  }): Promise<Job[]>;
  /** Cancels a job that has not started; false when it was not pending (or does not exist). */
  cancelJob(id: string, options?: TransactionOption): Promise<boolean>;
  /** Runs a dead, cancelled or retry-waiting job again now; false when it is in another state. */
  retryJob(id: string, options?: TransactionOption): Promise<boolean>;
  stats(): Promise<QueueStats[]>;
  close(): Promise<void>;
}

const ID_PATTERN = /^[0-9]{1,19}$/;

function checkId(id: string): string {
  if (typeof id !== 'string' || !ID_PATTERN.test(id)) {
    throw new SkiplockError(
      'invalid_id',
      `job id must be a positive integer string, got ${JSON.stringify(id)}`,
    );
  }
  return id;
}

interface RawJobRow {
  id: string;
  queue: string;
  job_type: string;
  payload: unknown;
  idempotency_key: string | null;
  status: JobStatus;
  priority: number;
  attempts: number;
  max_attempts: number;
  run_at: Date;
  locked_at: Date | null;
  locked_by: string | null;
  lease_expires_at: Date | null;
  lease_ms: number;
  timeout_ms: number | null;
  last_error: string | null;
  errors: Job['errors'];
  completed_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

export function toJob(row: RawJobRow): Job {
  const date = (v: Date | string | null) => (v === null ? null : new Date(v));
  return {
    id: row.id,
    queue: row.queue,
    jobType: row.job_type,
    payload: row.payload,
    idempotencyKey: row.idempotency_key,
    status: row.status,
    priority: row.priority,
    attempts: row.attempts,
    maxAttempts: row.max_attempts,
    runAt: new Date(row.run_at),
    lockedAt: date(row.locked_at),
    lockedBy: row.locked_by,
    leaseExpiresAt: date(row.lease_expires_at),
    leaseMs: row.lease_ms,
    timeoutMs: row.timeout_ms,
    lastError: row.last_error,
    errors: row.errors,
    completedAt: date(row.completed_at),
    createdAt: new Date(row.created_at),
    updatedAt: new Date(row.updated_at),
  };
}

export function createClient(options: ClientOptions = {}): Client {
  rejectUnknownKeys('client options', options, [
    'pool',
    'connectionString',
    'maxConnections',
    'logger',
    'maxPayloadBytes',
    'maxBulkSize',
  ]);
  const config = parseConfig('client options', clientOptionsSchema, options);
  const logger = options.logger ?? createDefaultLogger();
  const owned = resolvePool(options, logger, 'client');
  const pool = owned.pool;
  const maxPayloadBytes = config.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
  const maxBulkSize = config.maxBulkSize ?? 10_000;

  function toRow(definition: AnyJobDefinition, item: BulkItem<unknown>, where: string): JobRow {
    const { payload, ...rest } = item;
    let opts: z.output<typeof enqueueOptionsSchema>;
    try {
      opts = parseConfig(`enqueue options${where}`, enqueueOptionsSchema, rest);
    } catch (error) {
      logger.warn({ reason: 'invalid_options', jobType: definition.type }, errorText(error));
      throw error;
    }
    const parsed = definition.payload.safeParse(payload);
    if (!parsed.success) {
      const issues = payloadIssues(parsed.error).map((i) => ({
        ...i,
        path: `${where.trim()}${where ? '.' : ''}${i.path}`,
      }));
      const error = new InvalidPayloadError(definition.type, issues);
      logger.warn(
        { reason: 'invalid_payload', jobType: definition.type, fields: issues.map((i) => i.path) },
        'enqueue refused',
      );
      throw error;
    }
    // The producer's input is stored, not the parsed output, so schemas with transforms still
    // parse the stored JSON the same way in the worker.
    const payloadJson = JSON.stringify(payload ?? null);
    const size = Buffer.byteLength(payloadJson, 'utf8');
    if (size > maxPayloadBytes) {
      logger.warn(
        { reason: 'payload_too_large', jobType: definition.type, sizeBytes: size },
        'enqueue refused',
      );
      throw new PayloadTooLargeError(definition.type, size, maxPayloadBytes);
    }
    return {
      queue: opts.queue ?? definition.queue,
      jobType: definition.type,
      payloadJson,
      idempotencyKey: opts.idempotencyKey ?? null,
      priority: opts.priority ?? definition.priority,
      runAt: opts.runAt ?? null,
      delayMs: opts.delayMs ?? null,
      maxAttempts: opts.maxAttempts ?? definition.maxAttempts,
      timeoutMs: definition.timeoutMs,
      leaseMs: definition.leaseMs,
    };
  }

  async function insert(rows: JobRow[], target: Queryable): Promise<EnqueueResult[]> {
    const { rows: out } = await runSql<InsertedRow>(target, insertJobs(rows));
    const results = out.map((r) => ({ id: r.id as string | null, inserted: r.inserted }));
    // A duplicate whose first copy committed after this statement's snapshot (or came earlier in
    // this same batch) is invisible to the statement itself; a fresh statement sees it.
    const missing = results.flatMap((r, i) => (r.id === null ? [i] : []));
    if (missing.length > 0) {
      const pairs = missing.map((i) => ({ queue: rows[i]!.queue, key: rows[i]!.idempotencyKey! }));
      const { rows: found } = await runSql<{ id: string; queue: string; key: string }>(
        target,
        findJobsByKeys(pairs),
      );
      const byKey = new Map(found.map((f) => [`${f.queue}\u0000${f.key}`, f.id]));
      for (const i of missing) {
        const id = byKey.get(`${rows[i]!.queue}\u0000${rows[i]!.idempotencyKey}`);
        if (!id) {
          throw new SkiplockError(
            'idempotency_conflict',
            `job with idempotency key "${rows[i]!.idempotencyKey}" conflicted but is not visible; ` +
              'the conflicting transaction may use REPEATABLE READ or have rolled back — retry',
          );
        }
        results[i]!.id = id;
      }
    }
    return results as EnqueueResult[];
  }

  return {
    pool,
    async enqueue(definition, payload, opts = {}) {
      const { tx, ...rest } = opts;
      const [result] = await insert([toRow(definition, { ...rest, payload }, '')], tx ?? pool);
      return result!;
    },
    async enqueueMany(definition, items, opts = {}) {
      if (!Array.isArray(items)) throw new TypeError('enqueueMany: items must be an array');
      if (items.length === 0) return [];
      if (items.length > maxBulkSize) {
        throw new SkiplockError(
          'bulk_too_large',
          `enqueueMany got ${items.length} jobs, over the limit of ${maxBulkSize} per statement`,
        );
      }
      const rows = items.map((item, i) => toRow(definition, item, ` items[${i}]`));
      return insert(rows, opts.tx ?? pool);
    },
    async getJob(id, opts = {}) {
      const { rows } = await runSql<RawJobRow>(opts.tx ?? pool, selectJob(checkId(id)));
      return rows[0] ? toJob(rows[0]) : null;
    },
    async listJobs(filter = {}) {
      const limit = Math.min(Math.max(filter.limit ?? 50, 1), 1_000);
      if (filter.beforeId) checkId(filter.beforeId);
      const { rows } = await runSql<RawJobRow>(pool, selectJobs({ ...filter, limit }));
      return rows.map(toJob);
    },
    async cancelJob(id, opts = {}) {
      const { rowCount } = await runSql(opts.tx ?? pool, cancelJob(checkId(id)));
      return rowCount === 1;
    },
    async retryJob(id, opts = {}) {
      const { rowCount } = await runSql(opts.tx ?? pool, retryJob(checkId(id)));
      return rowCount === 1;
    },
    async stats() {
      const { rows } = await runSql<QueueStatsRow>(pool, selectQueueStats());
      return rows.map((r) => ({
        queue: r.queue,
        status: r.status,
        count: Number(r.count),
        oldestRunnableAgeMs: r.oldest_runnable_age_ms,
        expiredLeases: r.expired_leases,
        deadLastHour: r.dead_last_hour,
      }));
    },
    close: owned.release,
  };
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
