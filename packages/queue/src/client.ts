import type { StandardSchemaV1 } from '@standard-schema/spec';
import type pg from 'pg';
import { z } from 'zod';
import {
  concurrencyKeySchema,
  MAX_WINDOW_MS,
  parseConfig,
  queueName,
  rejectUnknownKeys,
  DEFAULT_MAX_PAYLOAD_BYTES,
} from './config.js';
import { runSql, withTransaction, type Queryable } from './db.js';
import { preparedRunner } from './prepared.js';
import type { JobDefinition, AnyJobDefinition, SingletonMode } from './define.js';
import { asStored, findJsonProblem } from './json-safe.js';
import {
  ConfigError,
  errorMessage,
  InvalidPayloadError,
  PayloadTooLargeError,
  SkiplockError,
} from './errors.js';
import { createDefaultLogger, type Logger } from './logger.js';
import { resolvePool, type PoolSource } from './pool.js';
import { jobStatus, type JobStatus } from './schema.js';
import { ENQUEUE_LEASED, type LeasedInsert } from './handoff.js';
import { admitKeys } from './sql/admit.js';
import type { ClaimedRow } from './sql/claim.js';
import { isThenable, issuesAt, runValidation } from './standard.js';
import {
  cancelJob,
  retryJob,
  selectJob,
  selectJobs,
  selectQueueStats,
  type QueueStatsRow,
} from './sql/admin.js';
import {
  clearLapsedStop,
  findJobByKey,
  findJobsByKeys,
  findSingleton,
  insertJob,
  insertKeyedJobs,
  insertSingletonKeep,
  insertSingletonReplace,
  insertLeasedJob,
  insertLeasedJobThen,
  insertUniformJobs,
  insertUnkeyedJobs,
  type InsertedRow,
  type JobRow,
  type SharedColumns,
  type SingletonHolderRow,
} from './sql/enqueue.js';
import {
  inSpan,
  resolveTracer,
  startSend,
  storedTrace,
  type StoredTrace,
  type TracingOption,
} from './tracing.js';
import { isRowId } from './row-id.js';

export interface EnqueueOptions {
  queue?: string | undefined;
  priority?: number | undefined;
  /** Absolute time to run at. Prefer `delayMs`, which is measured in the database's clock. */
  runAt?: Date | undefined;
  delayMs?: number | undefined;
  /** Unique per queue: a second enqueue with the same key inserts nothing and returns the first id. */
  idempotencyKey?: string | undefined;
  maxAttempts?: number | undefined;
  /**
   * This job's concurrency key, instead of the one its type's `concurrencyKey` names (null: none;
   * refused for a rate-limited type).
   * At most `concurrencyLimit` jobs of a key are admitted to run at a time, across all workers.
   */
  concurrencyKey?: string | null | undefined;
  /** Slots of the key for this job (default: its type's `concurrencyLimit`, else 1). */
  concurrencyLimit?: number | undefined;
  /**
   * At most one queued job per queue and singleton key (instead of the type's `singletonKey`;
   * null: none). What happens to a second one is `singletonMode`'s choice (default `keep`).
   */
  singletonKey?: string | null | undefined;
  singletonMode?: SingletonMode | undefined;
  singletonWindowMs?: number | undefined;
  singletonRunning?: boolean | undefined;
}

export interface TransactionOption {
  /** Join this transaction (a pg client inside BEGIN, or a drizzle transaction). */
  tx?: Queryable | undefined;
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
  /** Its concurrency key and that key's slots, when it has one. */
  concurrencyKey: string | null;
  concurrencyLimit: number | null;
  /** At most one queued job per queue holds it (see `singletonMode`). */
  singletonKey: string | null;
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
  /**
   * How long the oldest due job of a pending or retry-waiting row has been runnable, and of a
   * `waiting` row how long its oldest due job has waited for a slot of its concurrency key; null
   * for other statuses, and when no job of the row is due.
   */
  oldestRunnableAgeMs: number | null;
  /** Processing jobs whose lease has passed: the sweeper has not taken them back yet. */
  expiredLeases: number;
  /** Jobs that went dead in the last hour (by their last update). */
  deadLastHour: number;
}

export interface ClientOptions extends PoolSource {
  logger?: Logger | undefined;
  /** Largest serialized payload accepted, in bytes (default 256 KiB). */
  maxPayloadBytes?: number | undefined;
  /** Most jobs one bulk enqueue accepts (default 10,000); bounds statement size and memory. */
  maxBulkSize?: number | undefined;
  /**
   * Send enqueue statements as named prepared statements (default true): each connection parses
   * and plans them once. Turn off behind PgBouncer in transaction mode older than 1.21, or with
   * `max_prepared_statements = 0`, where a prepared statement does not follow the client. Left
   * on there, the first enqueue that lands on another server connection turns them off (logged
   * with reason `prepared_statements_off`); it fails only if it ran in the caller's transaction.
   */
  preparedStatements?: boolean | undefined;
  /**
   * OpenTelemetry: each enqueue is a `send <queue>` producer span whose context is stored on its
   * jobs (default true: the global tracer provider, a no-op until an SDK registers one). Pass
   * `{ tracerProvider }` to use another provider, `false` for none at all.
   */
  tracing?: TracingOption;
}

const MAX_DELAY_MS = 10 * 365 * 86_400_000;
// runAt as PostgreSQL and every clock here read it the same way; found by the property test (a
// year -4713 date reached the server and failed there, unnamed).
const MIN_RUN_AT = Date.UTC(1970, 0, 1);
const MAX_RUN_AT = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
const runAtInRange = (d: Date) => d.getTime() >= MIN_RUN_AT && d.getTime() <= MAX_RUN_AT;
// PostgreSQL text holds no NUL, and a lone surrogate would be stored as U+FFFD: another key.
const loneSurrogate = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const storableText = (s: string) => !s.includes('\u0000') && !loneSurrogate.test(s);

/** A singleton key, given or derived: like an idempotency key, storable text. */
const singletonKeySchema = z
  .string()
  .min(1)
  .max(512)
  .refine(storableText, 'must be well-formed text without NUL characters');

export const enqueueOptionsSchema = z
  .object({
    queue: queueName.optional(),
    priority: z.number().int().min(-1_000_000).max(1_000_000).optional(),
    runAt: z.date().refine(runAtInRange, 'must be a date from 1970 to 9999').optional(),
    delayMs: z.number().int().min(0).max(MAX_DELAY_MS).optional(),
    idempotencyKey: z
      .string()
      .min(1)
      .max(512)
      .refine(storableText, 'must be well-formed text without NUL characters')
      .optional(),
    maxAttempts: z.number().int().min(1).max(1_000).optional(),
    concurrencyKey: concurrencyKeySchema.nullable().optional(),
    concurrencyLimit: z.number().int().min(1).max(10_000).optional(),
    singletonKey: singletonKeySchema.nullable().optional(),
    singletonMode: z.enum(['keep', 'replace', 'throttle']).optional(),
    singletonWindowMs: z.number().int().min(1).max(MAX_WINDOW_MS).optional(),
    singletonRunning: z.boolean().optional(),
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
    preparedStatements: z.boolean().optional(),
  })
  .passthrough();

export interface Client {
  readonly pool: pg.Pool;
  /** The most jobs one `enqueueMany` accepts (`maxBulkSize`). */
  readonly maxBulkSize: number;
  enqueue<S extends StandardSchemaV1>(
    definition: JobDefinition<S>,
    payload: StandardSchemaV1.InferInput<S>,
    options?: EnqueueOptions & TransactionOption,
  ): Promise<EnqueueResult>;
  /** Enqueues many jobs of one type in a single statement; results are in input order. */
  enqueueMany<S extends StandardSchemaV1>(
    definition: JobDefinition<S>,
    items: readonly BulkItem<StandardSchemaV1.InferInput<S>>[],
    options?: TransactionOption,
  ): Promise<EnqueueResult[]>;
  getJob(id: string, options?: TransactionOption): Promise<Job | null>;
  listJobs(filter?: {
    statuses?: readonly JobStatus[] | undefined;
    queue?: string | undefined;
    jobType?: string | undefined;
    /**
     * Jobs whose current attempt runs on this worker (`Worker.id`; with `statuses: ['processing']`,
     * what it holds right now), or whose last attempt ran there.
     */
    workerId?: string | undefined;
    /** Jobs of this concurrency key. */
    concurrencyKey?: string | undefined;
    /**
     * Only jobs holding a slot of their concurrency key: pending, retry-waiting and running ones,
     * and a stopped run (`cancelled`, see `cancelJob`) until its handler returns or its lease
     * runs out. With `concurrencyKey`, what a `waiting` job of the key waits behind.
     */
    holdingSlot?: boolean | undefined;
    limit?: number | undefined;
    beforeId?: string | undefined;
  }): Promise<Job[]>;
  /**
   * Cancels a job that has not started (pending, retry-waiting, slot-waiting) or whose run's lease
   * has expired (its worker is gone or stuck; its `onDead` hook is not run); false when it is in
   * another state (or does not exist). With `running: true`, a running job too: its worker aborts
   * the handler (`ctx.signal`, a `LockLostError`) and writes nothing for it, at once when the worker
   * listens (the stop notifies it on `skiplock_stop`; a job stopped in its local buffer then never
   * starts), else at its next lease renewal, within a third of the job's lease. The stopped run
   * keeps its lease, and so its concurrency slot, until its handler has returned (its worker then
   * clears the lease) or the lease runs out (its worker gone, or a handler ignoring its signal for
   * a whole lease); the job cannot be retried until then.
   */
  cancelJob(
    id: string,
    options?: TransactionOption & LockWaitOption & { running?: boolean | undefined },
  ): Promise<boolean>;
  /**
   * Runs a dead, cancelled, retry-waiting or slot-waiting job, or one whose run's lease has
   * expired, again now with a fresh set of attempts; false when it is in another state, or is a
   * job stopped while it ran whose stopped run has not ended (see `cancelJob`).
   */
  retryJob(id: string, options?: TransactionOption & LockWaitOption): Promise<boolean>;
  stats(): Promise<QueueStats[]>;
  close(): Promise<void>;
}

export interface LockWaitOption {
  /**
   * Waits at most this long (ms, 1 to an hour) for the job's row when another transaction holds
   * it (its `completeWith` still open, say), then throws `SkiplockError` `job_busy`, having
   * changed nothing; by default it waits as long as the holder does. Not with `tx`: it would set
   * that transaction's `lock_timeout`.
   */
  lockWaitMs?: number | undefined;
}

/**
 * The `lockWaitMs` of an action's options, checked (see `LockWaitOption`); the saga runtime's
 * actions take the same option and check it here (through `@skiplock/queue/engine`).
 */
export function lockWaitOf(options: TransactionOption & LockWaitOption): number | null {
  const ms = options.lockWaitMs;
  if (ms === undefined) return null;
  if (!Number.isInteger(ms) || ms < 1 || ms > 3_600_000) {
    throw new ConfigError(
      `lockWaitMs must be a whole number of ms from 1 to 3600000, not ${String(ms)}`,
    );
  }
  if (options.tx !== undefined) {
    throw new ConfigError(
      "lockWaitMs cannot be given with tx: it sets lock_timeout for its statement's transaction, which in yours would last to its end",
    );
  }
  return ms;
}

/**
 * `work`, with a lock wait past `lock_timeout` (SQLSTATE 55P03) as `job_busy`, unless it ran in
 * the caller's transaction, which that error aborted: there it is the caller's to handle.
 */
async function busyAsJobBusy<T>(
  id: string,
  options: TransactionOption,
  work: Promise<T>,
): Promise<T> {
  try {
    return await work;
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    if (code !== '55P03' || options.tx !== undefined) throw error;
    throw new SkiplockError(
      'job_busy',
      `job ${id} is held by another transaction (its completeWith or a saga step's transaction still open, an operator's); nothing was changed: try again`,
      { cause: error },
    );
  }
}

interface KeyedRow {
  id: string;
  concurrency_key: string | null;
}

function checkId(id: string): string {
  if (typeof id !== 'string' || !isRowId(id)) {
    throw new SkiplockError(
      'invalid_id',
      `job id must be a positive integer string within bigint's range, got ${JSON.stringify(id)}`,
    );
  }
  return id;
}

const JOB_STATUSES: ReadonlySet<unknown> = new Set(jobStatus.enumValues);

/**
 * Refuses a `listJobs` filter PostgreSQL would fail on (a limit of NaN or 2.5, a status not in
 * the enum, a text with NUL) or silently misread (a status string for the list, a number for a
 * queue), naming the field. Returns the limit, if given.
 */
function checkListFilter(filter: Record<string, unknown>): number | undefined {
  const { limit } = filter;
  if (limit != null && !Number.isInteger(limit)) {
    throw new SkiplockError(
      'invalid_limit',
      `limit must be an integer (1 to 1000), got ${typeof limit === 'number' ? limit : JSON.stringify(limit)}`,
    );
  }
  checkJobFilter(filter);
  return (limit ?? undefined) as number | undefined;
}

/**
 * Refuses a job filter's statuses that are not an array of job statuses and a queue, job type,
 * worker id or concurrency key that is not a string without NUL (`invalid_filter`), which PostgreSQL would fail on.
 */
export function checkJobFilter(filter: Record<string, unknown>): void {
  const { statuses } = filter;
  if (statuses != null) {
    const bad = Array.isArray(statuses) ? statuses.find((x) => !JOB_STATUSES.has(x)) : statuses;
    if (!Array.isArray(statuses) || bad !== undefined) {
      throw new SkiplockError(
        'invalid_filter',
        `statuses must be an array of ${[...JOB_STATUSES].join(', ')}; got ${JSON.stringify(bad)}`,
      );
    }
  }
  const { holdingSlot } = filter;
  if (holdingSlot != null && typeof holdingSlot !== 'boolean') {
    throw new SkiplockError(
      'invalid_filter',
      `holdingSlot must be a boolean, got ${JSON.stringify(holdingSlot)}`,
    );
  }
  for (const name of ['queue', 'jobType', 'workerId', 'concurrencyKey'] as const) {
    const value = filter[name];
    if (value != null && (typeof value !== 'string' || value.includes('\u0000'))) {
      throw new SkiplockError(
        'invalid_filter',
        `${name} must be a string without NUL characters, got ${JSON.stringify(value)}`,
      );
    }
  }
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
  concurrency_key: string | null;
  concurrency_limit: number | null;
  singleton_key: string | null;
}

export function toJob(row: RawJobRow): Job {
  const date = (v: Date | string | null) => (v === null ? null : new Date(v));
  return {
    id: row.id,
    queue: row.queue,
    jobType: row.job_type,
    payload: row.payload,
    idempotencyKey: row.idempotency_key,
    concurrencyKey: row.concurrency_key,
    concurrencyLimit: row.concurrency_limit,
    singletonKey: row.singleton_key,
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
    'preparedStatements',
    'tracing',
  ]);
  const config = parseConfig('client options', clientOptionsSchema, options);
  const logger = options.logger ?? createDefaultLogger();
  const owned = resolvePool(options, logger, 'client');
  const pool = owned.pool;
  const maxPayloadBytes = config.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
  const maxBulkSize = config.maxBulkSize ?? 10_000;

  function readOptions(
    definition: AnyJobDefinition,
    options: Record<string, unknown>,
    where: string,
  ): EnqueueOptions {
    if (options['runAt'] !== undefined && options['delayMs'] !== undefined) {
      const error = new ConfigError(
        `enqueue options${where}: runAt and delayMs are both set; give one of them`,
      );
      logger.warn({ reason: 'invalid_options', jobType: definition.type }, error.message);
      throw error;
    }
    const checked = checkEnqueueOptions(options);
    if (checked) return checked;
    try {
      return parseConfig(`enqueue options${where}`, enqueueOptionsSchema, options);
    } catch (error) {
      logger.warn({ reason: 'invalid_options', jobType: definition.type }, errorText(error));
      throw error;
    }
  }

  /**
   * Validates a payload against its job type and returns the JSON to store, size-checked. Stays
   * synchronous unless the schema's validation returns a Promise.
   */
  function serialize(
    definition: AnyJobDefinition,
    payload: unknown,
    where: string,
  ): string | Promise<string> {
    const result = runValidation(definition.payload, payload);
    if (isThenable(result)) {
      return Promise.resolve(result).then((r) => checkedJson(definition, payload, where, r));
    }
    return checkedJson(definition, payload, where, result);
  }

  function checkedJson(
    definition: AnyJobDefinition,
    payload: unknown,
    where: string,
    result: StandardSchemaV1.Result<unknown>,
  ): string | Promise<string> {
    const at = `${where.trim()}${where ? '.' : ''}payload`;
    if (result.issues) {
      const issues = issuesAt(at, result.issues);
      const error = new InvalidPayloadError(definition.type, issues);
      logger.warn(
        { reason: 'invalid_payload', jobType: definition.type, fields: issues.map((i) => i.path) },
        'enqueue refused',
      );
      throw error;
    }
    const notes = { converted: false };
    const problem = findJsonProblem(payload, at, notes);
    if (problem) {
      logger.warn(
        { reason: 'invalid_payload', jobType: definition.type, fields: [problem.path] },
        'enqueue refused',
      );
      throw new InvalidPayloadError(definition.type, [problem]);
    }
    // The producer's input is stored, not the parsed output, so schemas with transforms still
    // parse the stored JSON the same way in the worker.
    const payloadJson = JSON.stringify(payload ?? null);
    // A UTF-8 byte is at least one UTF-16 unit and at most three, so most payloads are settled
    // without counting their bytes.
    if (payloadJson.length * 3 > maxPayloadBytes) {
      const size = Buffer.byteLength(payloadJson, 'utf8');
      if (size > maxPayloadBytes) {
        logger.warn(
          { reason: 'payload_too_large', jobType: definition.type, sizeBytes: size },
          'enqueue refused',
        );
        throw new PayloadTooLargeError(definition.type, size, maxPayloadBytes);
      }
    }
    // A Date (or any toJSON value) is stored as something else, so the worker will parse what
    // JSON made of it: check that now, not on every attempt of a job that can never run.
    if (!notes.converted) return payloadJson;
    const stored = runValidation(definition.payload, JSON.parse(payloadJson));
    return isThenable(stored)
      ? Promise.resolve(stored).then((r) => storedJson(definition, at, payloadJson, r))
      : storedJson(definition, at, payloadJson, stored);
  }

  function storedJson(
    definition: AnyJobDefinition,
    at: string,
    payloadJson: string,
    result: StandardSchemaV1.Result<unknown>,
  ): string {
    if (!result.issues) return payloadJson;
    const issues = issuesAt(at, result.issues).map(asStored);
    logger.warn(
      { reason: 'invalid_payload', jobType: definition.type, fields: issues.map((i) => i.path) },
      'enqueue refused',
    );
    throw new InvalidPayloadError(definition.type, issues);
  }

  function toRow(
    definition: AnyJobDefinition,
    payload: unknown,
    options: Record<string, unknown>,
    where: string,
  ): JobRow | Promise<JobRow> {
    const opts = readOptions(definition, options, where);
    const concurrencyKey = keyOf(definition, payload, opts, where);
    const { singleton, idempotencyKey } = singletonOf(definition, payload, opts, where);
    const toJobRow = (payloadJson: string): JobRow => ({
      queue: opts.queue ?? definition.queue,
      jobType: definition.type,
      payloadJson,
      idempotencyKey,
      singleton,
      priority: opts.priority ?? definition.priority,
      runAt: opts.runAt ?? null,
      delayMs: opts.delayMs ?? null,
      maxAttempts: opts.maxAttempts ?? definition.maxAttempts,
      timeoutMs: definition.timeoutMs,
      leaseMs: definition.leaseMs,
      concurrencyKey,
      concurrencyLimit:
        concurrencyKey === null ? null : (opts.concurrencyLimit ?? definition.concurrencyLimit),
      rateLimit: concurrencyKey === null ? null : (definition.rateLimit?.limit ?? null),
      rateIntervalMs: concurrencyKey === null ? null : (definition.rateLimit?.intervalMs ?? null),
      traceParent: null,
      traceState: null,
    });
    const payloadJson = serialize(definition, payload, where);
    return isThenable(payloadJson) ? payloadJson.then(toJobRow) : toJobRow(payloadJson);
  }

  /**
   * A key a job type derives from a payload (`concurrencyKey`, `singletonKey`): null, or a string
   * the schema accepts; anything else, or a throw, is a ConfigError naming the type and the key.
   */
  function derivedKey(
    definition: AnyJobDefinition,
    what: 'concurrencyKey' | 'singletonKey',
    derive: (payload: unknown) => unknown,
    payload: unknown,
    where: string,
    schema: z.ZodType<string>,
  ): string | null {
    let key: unknown;
    try {
      key = derive(payload);
    } catch (error) {
      throw new ConfigError(
        `job type "${definition.type}"${where}: ${what} threw: ${errorText(error)}`,
      );
    }
    if (key === null) return null;
    const checked = schema.safeParse(key);
    if (!checked.success) {
      throw new ConfigError(
        `job type "${definition.type}"${where}: ${what} returned ${JSON.stringify(key)}; ` +
          `it must be a string or null (${checked.error.issues[0]?.message})`,
      );
    }
    return checked.data;
  }

  /**
   * The enqueue option when given, else what the type's `concurrencyKey` names, checked. A job of
   * a rate-limited type must have one: without a key it would start outside the rate limit.
   */
  function keyOf(
    definition: AnyJobDefinition,
    payload: unknown,
    opts: EnqueueOptions,
    where: string,
  ): string | null {
    const key =
      opts.concurrencyKey !== undefined
        ? opts.concurrencyKey
        : definition.concurrencyKey
          ? derivedKey(
              definition,
              'concurrencyKey',
              definition.concurrencyKey,
              payload,
              where,
              concurrencyKeySchema,
            )
          : null;
    if (key === null && definition.rateLimit) {
      throw new ConfigError(
        `job type "${definition.type}"${where}: its concurrency key is null, but the type is ` +
          `rate-limited and a job without a key would start outside the limit; give a key or ` +
          `leave concurrencyKey out`,
      );
    }
    return key;
  }

  /**
   * The singleton rule of one enqueue: its key (the option, else the type's `singletonKey`), its
   * mode and whether running jobs count. A throttle becomes an idempotency key per window
   * (windows aligned to the epoch in this host's clock), so it holds whatever the job's state.
   */
  function singletonOf(
    definition: AnyJobDefinition,
    payload: unknown,
    opts: EnqueueOptions,
    where: string,
  ): { singleton: JobRow['singleton']; idempotencyKey: string | null } {
    const given = opts.idempotencyKey ?? null;
    const key =
      opts.singletonKey !== undefined
        ? opts.singletonKey
        : definition.singletonKey
          ? derivedKey(
              definition,
              'singletonKey',
              definition.singletonKey,
              payload,
              where,
              singletonKeySchema,
            )
          : null;
    if (key === null) return { singleton: null, idempotencyKey: given };
    const mode = opts.singletonMode ?? definition.singletonMode;
    const refuse = (why: string) =>
      new ConfigError(`enqueue options${where} (job type "${definition.type}"): ${why}`);
    if (mode !== 'keep' && given !== null) {
      throw refuse(`singletonMode "${mode}" cannot be combined with an idempotencyKey`);
    }
    if (mode === 'throttle') {
      const windowMs = opts.singletonWindowMs ?? definition.singletonWindowMs;
      if (windowMs === null || windowMs === undefined) {
        throw refuse('singletonMode "throttle" needs singletonWindowMs');
      }
      return {
        singleton: null,
        idempotencyKey: `throttle:${key}:${Math.floor(Date.now() / windowMs)}`,
      };
    }
    return {
      singleton: {
        key,
        mode,
        running: opts.singletonRunning ?? definition.singletonRunning,
      },
      idempotencyKey: given,
    };
  }

  const run = preparedRunner({
    enabled: config.preparedStatements ?? true,
    pool,
    logger,
    who: 'enqueue',
  });
  const tracer = resolveTracer(options.tracing, 'client options');

  /**
   * Runs the insert of `count` jobs inside its producer span; `stamp` stores the span's context
   * on the rows first. With no recording span (no SDK) this is the insert and a no-op span.
   */
  function sending<T extends { id: string }[] | { id: string }>(
    queue: string | null,
    jobType: string,
    count: number,
    stamp: (trace: StoredTrace) => void,
    insert: () => Promise<T>,
  ): Promise<T> {
    if (!tracer) return insert();
    const span = startSend(tracer, queue, jobType, count);
    const stored = storedTrace(span);
    if (stored) stamp(stored);
    if (!span.isRecording()) return insert();
    return inSpan(span, insert, (sent, result) => {
      if (!Array.isArray(result)) sent.setAttribute('messaging.message.id', result.id);
    });
  }

  const stampRow =
    (row: { traceParent: string | null; traceState: string | null }) => (t: StoredTrace) => {
      row.traceParent = t.parent;
      row.traceState = t.state;
    };

  /**
   * With `leasedTo`, the job is inserted already claimed by that worker (a hand-off) and the
   * result carries the claimed row; without a conflict either way this is one statement.
   */
  async function insertOne(
    row: JobRow,
    target: Queryable,
    leasedTo: string | null = null,
    then: readonly { text: string; values: unknown[] }[] = [],
  ): Promise<EnqueueResult & { claimed?: ClaimedRow }> {
    // Without a conflict this is the only statement. With one, the id is read in a fresh statement,
    // whose snapshot sees the conflicting job even when its transaction committed while the insert
    // waited for it. Should that job be gone by then (pruned, or deleted by hand), the key is free
    // again and the insert is tried once more.
    if (row.singleton && leasedTo === null) return insertSingleton(row, target);
    for (let attempt = 1; ; attempt++) {
      if (leasedTo !== null) {
        const { rows } = await run<ClaimedRow>(
          target,
          then.length > 0
            ? insertLeasedJobThen(row, leasedTo, then)
            : insertLeasedJob(row, leasedTo),
        );
        if (rows[0]) return { id: rows[0].id, inserted: true, claimed: rows[0] };
      } else {
        const { rows } = await run<{ id: string }>(target, insertJob(row));
        if (rows[0]) return { id: rows[0].id, inserted: true };
      }
      if (row.idempotencyKey === null) {
        throw new SkiplockError('enqueue_failed', 'insert of a job without a key returned no row');
      }
      const { rows: found } = await run<{ id: string }>(
        target,
        findJobByKey(row.queue, row.idempotencyKey),
      );
      if (found[0]) return { id: found[0].id, inserted: false };
      if (attempt === 3) throw invisibleConflict(row.idempotencyKey);
    }
  }

  /**
   * One statement without a conflict. With one, a fresh statement finds the job that holds the
   * key (its snapshot sees a holder that committed while the insert waited); should that job have
   * started or gone meanwhile, the insert is tried again. A stopped run whose lease ran out holds
   * the key only until an enqueue meets it: its lease is cleared, and the insert tried again.
   */
  async function insertSingleton(row: JobRow, target: Queryable): Promise<EnqueueResult> {
    const singleton = row.singleton!;
    const keyed = { ...row, singleton };
    let cleared = false;
    for (let attempt = 1; attempt <= 3; attempt++) {
      const { rows } = await run<{ id: string; inserted: boolean }>(
        target,
        singleton.mode === 'replace' ? insertSingletonReplace(keyed) : insertSingletonKeep(keyed),
      );
      if (rows[0]) return { id: rows[0].id, inserted: rows[0].inserted };
      const holder =
        row.idempotencyKey !== null
          ? (await run<{ id: string }>(target, findJobByKey(row.queue, row.idempotencyKey))).rows
          : [];
      if (holder[0]) return { id: holder[0].id, inserted: false };
      const { rows: found } = await run<SingletonHolderRow>(
        target,
        findSingleton(row.queue, singleton.key, singleton.running),
      );
      if (found[0]?.lapsed && !cleared) {
        await run(target, clearLapsedStop(found[0].id));
        cleared = true;
        attempt--;
        continue;
      }
      if (found[0]) return { id: found[0].id, inserted: false };
    }
    throw new SkiplockError(
      'enqueue_conflict',
      `singleton key "${singleton.key}" stayed taken by a job no statement could see; try again`,
    );
  }

  async function insertMany(rows: JobRow[], target: Queryable): Promise<EnqueueResult[]> {
    if (rows.some((r) => r.singleton !== null)) {
      // Each row's conflict is decided by its own statement, in one transaction.
      const each = async (tx: Queryable) => {
        const out: EnqueueResult[] = [];
        for (const row of rows) out.push(await insertOne(row, tx));
        return out;
      };
      return target === pool ? withTransaction(pool, each) : each(target);
    }
    if (!rows.some((r) => r.idempotencyKey !== null)) {
      const { rows: out } = await run<{ id: string }>(target, insertUnkeyedJobs(rows));
      return out.map((r) => ({ id: r.id, inserted: true }));
    }
    const { rows: out } = await run<InsertedRow>(target, insertKeyedJobs(rows));
    const results = out.map((r) => ({ id: r.id as string | null, inserted: r.inserted }));
    // A duplicate whose first copy committed after this statement's snapshot (or came earlier in
    // this same batch) is invisible to the statement itself; a fresh statement sees it.
    const missing = results.flatMap((r, i) => (r.id === null ? [i] : []));
    if (missing.length > 0) {
      const pairs = missing.map((i) => ({ queue: rows[i]!.queue, key: rows[i]!.idempotencyKey! }));
      const { rows: found } = await run<{ id: string; queue: string; key: string }>(
        target,
        findJobsByKeys(pairs),
      );
      const byKey = new Map(found.map((f) => [`${f.queue}\u0000${f.key}`, f.id]));
      for (const i of missing) {
        const id = byKey.get(`${rows[i]!.queue}\u0000${rows[i]!.idempotencyKey}`);
        if (!id) throw invisibleConflict(rows[i]!.idempotencyKey!);
        results[i]!.id = id;
      }
    }
    return results as EnqueueResult[];
  }

  /**
   * A cancel frees its job's slot and a retry makes it wait for one: admit the key now. Inside the
   * caller's transaction the change is not visible to others yet; workers' admission passes (every
   * second by default) take it from there, as they do when this admission fails: the cancel or
   * retry has committed by then, so its failure is logged (`admit_after_failed`), not thrown (the
   * caller was told the change failed when it had not: found in review).
   */
  async function admitAfter(row: KeyedRow | undefined, tx: Queryable | undefined): Promise<void> {
    if (!row?.concurrency_key || tx) return;
    try {
      await runSql(
        pool,
        admitKeys({
          keys: [row.concurrency_key],
          wait: true,
          maxKeys: 1,
          afterKey: null,
          lease: null,
        }),
      );
    } catch (error) {
      logger.warn(
        { reason: 'admit_after_failed', jobId: row.id, err: errorMessage(error) },
        "could not admit the job's concurrency key after its change; workers' admission passes will",
      );
    }
  }

  const client: Client = {
    pool,
    maxBulkSize,
    async enqueue(definition, payload, opts = {}) {
      const { tx, ...rest } = opts;
      const made = toRow(definition, payload, rest, '');
      const row = isThenable(made) ? await made : made;
      return sending(row.queue, row.jobType, 1, stampRow(row), () => insertOne(row, tx ?? pool));
    },
    async enqueueMany(definition, items, opts = {}) {
      if (!Array.isArray(items)) throw new TypeError('enqueueMany: items must be an array');
      if (items.length === 0) return [];
      // Named here: a null item failed further on with "Cannot convert undefined or null to
      // object", which said neither which item nor what an item is (found by an audit).
      const notItem = items.findIndex((item) => typeof item !== 'object' || item === null);
      if (notItem !== -1) {
        const item: unknown = items[notItem];
        throw new TypeError(
          `enqueueMany: items[${notItem}] must be an object { payload, ...options }, not ${item === null ? 'null' : typeof item}`,
        );
      }
      if (items.length > maxBulkSize) {
        throw new SkiplockError(
          'bulk_too_large',
          `enqueueMany got ${items.length} jobs, over the limit of ${maxBulkSize} per statement`,
        );
      }
      const target = opts.tx ?? pool;
      if (
        definition.concurrencyKey === null &&
        definition.singletonKey === null &&
        items.every(hasPayloadOnly)
      ) {
        // The common bulk: no item carries options, so every column but the payload comes from
        // the definition and travels once, not once per job.
        const payloads = await settleAll(items, (item, i) =>
          serialize(definition, item.payload, ` items[${i}]`),
        );
        const shared: SharedColumns = {
          queue: definition.queue,
          jobType: definition.type,
          priority: definition.priority,
          runAt: null,
          delayMs: null,
          maxAttempts: definition.maxAttempts,
          timeoutMs: definition.timeoutMs,
          leaseMs: definition.leaseMs,
          traceParent: null,
          traceState: null,
        };
        return sending(
          definition.queue,
          definition.type,
          items.length,
          stampRow(shared),
          async () => {
            const { rows } = await run<{ id: string }>(target, insertUniformJobs(shared, payloads));
            return rows.map((r) => ({ id: r.id, inserted: true }));
          },
        );
      }
      const rows = await settleAll(items, (item, i) => {
        const { payload, ...options } = item;
        return toRow(definition, payload, options, ` items[${i}]`);
      });
      // One producer span for the bulk; its rows share it. A bulk into several queues names none.
      const queue = rows[0]!.queue;
      return sending(
        rows.every((r) => r.queue === queue) ? queue : null,
        definition.type,
        rows.length,
        (t) => rows.forEach((row) => stampRow(row)(t)),
        () => insertMany(rows, target),
      );
    },
    async getJob(id, opts = {}) {
      const { rows } = await runSql<RawJobRow>(opts.tx ?? pool, selectJob(checkId(id)));
      return rows[0] ? toJob(rows[0]) : null;
    },
    async listJobs(filter = {}) {
      const limit = Math.min(Math.max(checkListFilter(filter) ?? 50, 1), 1_000);
      if (filter.beforeId) checkId(filter.beforeId);
      const { rows } = await runSql<RawJobRow>(pool, selectJobs({ ...filter, limit }));
      return rows.map(toJob);
    },
    async cancelJob(id, opts = {}) {
      const waitMs = lockWaitOf(opts);
      const { rows } = await busyAsJobBusy(
        id,
        opts,
        runSql<KeyedRow>(opts.tx ?? pool, cancelJob(checkId(id), opts.running === true, waitMs)),
      );
      await admitAfter(rows[0], opts.tx);
      return rows.length === 1;
    },
    async retryJob(id, opts = {}) {
      const waitMs = lockWaitOf(opts);
      const { rows } = await busyAsJobBusy(
        id,
        opts,
        runSql<KeyedRow>(opts.tx ?? pool, retryJob(checkId(id), waitMs)),
      );
      await admitAfter(rows[0], opts.tx);
      return rows.length === 1;
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
  const leased: LeasedInsert = async (definition, payload, opts, tx, workerId, then) => {
    const { tx: _ignored, ...rest } = opts;
    const made = toRow(definition, payload, rest, '');
    const row = isThenable(made) ? await made : made;
    return sending(row.queue, row.jobType, 1, stampRow(row), () =>
      insertOne(row, tx, workerId, then),
    );
  };
  Object.defineProperty(client, ENQUEUE_LEASED, { value: leased });
  return client;
}

function invisibleConflict(key: string): SkiplockError {
  return new SkiplockError(
    'idempotency_conflict',
    `job with idempotency key "${key}" conflicted but is not visible; ` +
      'the conflicting transaction may use REPEATABLE READ or have rolled back — retry',
  );
}

/**
 * Maps every item in order; the result is awaited only when some item's work returned a Promise
 * (a schema with async validation), so a bulk of synchronous schemas costs no promise per item.
 * Work that throws for one item leaves no other item's Promise rejected unhandled.
 */
function settleAll<T, R>(
  items: readonly T[],
  work: (item: T, index: number) => R | Promise<R>,
): R[] | Promise<R[]> {
  const out: (R | Promise<R>)[] = new Array(items.length);
  let pending = false;
  try {
    for (let i = 0; i < items.length; i++) {
      const value = work(items[i]!, i);
      if (isThenable(value)) pending = true;
      out[i] = value;
    }
  } catch (error) {
    for (const value of out) if (isThenable(value)) value.then(undefined, () => {});
    throw error;
  }
  return pending ? Promise.all(out) : (out as R[]);
}

/** True when a bulk item carries nothing but its payload (options left out or undefined). */
function hasPayloadOnly(item: BulkItem<unknown>): boolean {
  for (const key of Object.keys(item)) {
    if (key !== 'payload' && (item as unknown as Record<string, unknown>)[key] !== undefined) {
      return false;
    }
  }
  return true;
}

const QUEUE_NAME_PATTERN = /^[A-Za-z0-9_.:-]+$/;

function isIntIn(value: unknown, min: number, max: number): boolean {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= min && value <= max;
}

/**
 * The checks of `enqueueOptionsSchema` written out, so an enqueue costs a few comparisons instead
 * of a zod parse. It accepts nothing the schema refuses; whatever it does not accept goes to the
 * schema, which either accepts it too or throws the error naming the option. A test holds the two
 * in step.
 */
export function checkEnqueueOptions(options: Record<string, unknown>): EnqueueOptions | null {
  for (const key of Object.keys(options)) {
    const value = options[key];
    if (value === undefined) continue;
    switch (key) {
      case 'queue':
        if (typeof value !== 'string' || value.length > 128 || !QUEUE_NAME_PATTERN.test(value)) {
          return null;
        }
        break;
      case 'priority':
        if (!isIntIn(value, -1_000_000, 1_000_000)) return null;
        break;
      case 'runAt':
        if (!(value instanceof Date) || !runAtInRange(value)) return null;
        break;
      case 'delayMs':
        if (!isIntIn(value, 0, MAX_DELAY_MS)) return null;
        break;
      case 'idempotencyKey':
        if (typeof value !== 'string' || value.length < 1 || value.length > 512) return null;
        if (!storableText(value)) return null;
        break;
      case 'maxAttempts':
        if (!isIntIn(value, 1, 1_000)) return null;
        break;
      case 'concurrencyKey':
        if (value === null) break;
        if (typeof value !== 'string' || value.length < 1 || value.length > 200) return null;
        if (value.includes('\u0000')) return null;
        break;
      case 'concurrencyLimit':
        if (!isIntIn(value, 1, 10_000)) return null;
        break;
      case 'singletonKey':
        if (value === null) break;
        if (typeof value !== 'string' || value.length < 1 || value.length > 512) return null;
        if (!storableText(value)) return null;
        break;
      case 'singletonMode':
        if (value !== 'keep' && value !== 'replace' && value !== 'throttle') return null;
        break;
      case 'singletonWindowMs':
        if (!isIntIn(value, 1, MAX_WINDOW_MS)) return null;
        break;
      case 'singletonRunning':
        if (typeof value !== 'boolean') return null;
        break;
      default:
        return null;
    }
  }
  return options as EnqueueOptions;
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
