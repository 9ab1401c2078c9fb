import type { StandardSchemaV1 } from '@standard-schema/spec';
import type pg from 'pg';
import { jobOptionsSchema, parseConfig, queueName, DEFAULT_LEASE_MS } from './config.js';
import { ConfigError, InvalidPayloadError } from './errors.js';
import type { Logger } from './logger.js';
import { backoffWith, type BackoffOptions } from './retry/backoff.js';
import type { DeadReason, ErrorClass } from './retry/policy.js';
import { findSchemaJsonProblem } from './schema-json.js';
import { issuesAt, runValidation, standardSchemaProblem } from './standard.js';
import type { TraceMode } from './tracing.js';

/** What a handler knows about the job it runs. */
export interface JobInfo {
  id: string;
  type: string;
  queue: string;
  /** 1-based number of this attempt. */
  attempt: number;
  maxAttempts: number;
  priority: number;
  idempotencyKey: string | null;
}

/**
 * What a handler gets besides its payload. Every member but `job` is a getter, so a handler pays
 * for what it reads only: use the context itself, pass it on, or destructure the members it needs
 * (`async (payload, { signal, completeWith }) => ...`); a copy made by spreading it or with
 * `Object.assign` carries `job` only.
 */
export interface JobContext {
  job: JobInfo;
  /** Fires with a `JobTimeoutError`, `LockLostError` or `ShutdownError` as its reason. */
  signal: AbortSignal;
  logger: Logger;
  /**
   * Stable across every attempt of this job: the job's idempotency key when it has one, else
   * `job:<id>`. Pass it to external APIs so that a retried attempt does not repeat an effect.
   */
  idempotencyKey: string;
  /**
   * Renews this job's lease to now + `leaseMs` (default the job's own; 1 ms to a day), never to
   * less than it has left; false if the lock is lost. Inside `completeWith`'s work it writes
   * nothing and returns true: the completing transaction holds the job's row until it ends.
   */
  extendLease(leaseMs?: number): Promise<boolean>;
  /**
   * Completes the job inside a transaction and runs `work` in the same transaction, so that the
   * handler's own writes and the completion commit together. The completion is fenced by the
   * claim's lock token: if the worker lost the job, this throws `LockLostError` and nothing commits.
   * The attempt's timeout, a lost lease or the shutdown deadline ends the transaction even while
   * `work` waits: this rejects with that reason, nothing commits, and `tx` is closed. Once per
   * attempt: a call inside `work` (use its `tx`) or beside an open one rejects with code
   * `complete_with_open`, a call after one committed with `already_completed`; after one that
   * rejected, the handler may call it again.
   */
  completeWith<T>(work: (tx: pg.PoolClient) => Promise<T>): Promise<T>;
}

export interface DeadJobInfo extends JobInfo {
  reason: DeadReason;
  error: string;
}

export interface JobOptions {
  queue?: string | undefined;
  priority?: number | undefined;
  maxAttempts?: number | undefined;
  backoff?: Partial<BackoffOptions> | undefined;
  /** Per-attempt timeout; the handler's signal fires and the attempt fails with reason `timeout`. */
  timeoutMs?: number | null | undefined;
  /** Visibility timeout of a claim; heartbeats renew it while the handler runs. */
  leaseMs?: number | undefined;
  /** Errors of these classes send the job to dead at once. */
  nonRetryable?: readonly ErrorClass[] | undefined;
  /**
   * Runs in the same transaction that marks the job dead (fenced by the lock token), so follow-up
   * work such as a saga's compensation commits together with the dead state.
   */
  onDead?: ((tx: pg.PoolClient, job: DeadJobInfo) => Promise<void>) | undefined;
  /**
   * Max jobs of one concurrency key admitted at a time (default 1), across every worker and host.
   * Used with `concurrencyKey`; an enqueue may override it.
   */
  concurrencyLimit?: number | undefined;
  /**
   * What an enqueue does when a queued job (pending, retryable or waiting) already has its
   * singleton key: `keep` it (default; the enqueue returns its id), `replace` its payload,
   * priority and run time (debounce), or `throttle`: one job per `singletonWindowMs` window.
   */
  singletonMode?: SingletonMode | undefined;
  /** The window of `throttle`, in ms. */
  singletonWindowMs?: number | null | undefined;
  /**
   * A running job with the key blocks a new one too (default false: a job that has started no
   * longer holds the key). Holds between jobs that both ask for it.
   */
  singletonRunning?: boolean | undefined;
  /**
   * How a run's OpenTelemetry span relates to its enqueue's: `link` (default) starts a trace of
   * its own linked to the enqueue's span; `continue` makes the run a child of that span, in the
   * enqueuer's trace (jobs that are steps of one workflow).
   */
  trace?: TraceMode | undefined;
}

export type SingletonMode = 'keep' | 'replace' | 'throttle';

/** At most `limit` starts per `intervalMs` of one key, across every worker and host. */
export interface RateLimit<P = unknown> {
  limit: number;
  intervalMs: number;
  /**
   * The key counted: per tenant, per API... Without one, the job type's `concurrencyKey` if it
   * has one, else the whole job type (`rate:<type>`: one limit for all its jobs).
   */
  key?: ((payload: P) => string) | undefined;
}

export interface JobDefinitionInput<S extends StandardSchemaV1> extends JobOptions {
  /**
   * Names the concurrency key of a job from its payload (a tenant, a customer, an external API):
   * at no instant do more than `concurrencyLimit` jobs of one key run, across all workers. Keys
   * are shared across job types and queues. Return null for a job that takes no slot (an
   * enqueue of a rate-limited type refuses it: such a job would start outside the limit).
   */
  concurrencyKey?: ((payload: StandardSchemaV1.InferInput<S>) => string | null) | null | undefined;
  /**
   * Names a job's singleton key from its payload: at most one queued job per queue and key (see
   * `singletonMode`). Return null for a job without one.
   */
  singletonKey?: ((payload: StandardSchemaV1.InferInput<S>) => string | null) | null | undefined;
  /**
   * At most `limit` job starts per `intervalMs` of a key (see `RateLimit`), enforced in the
   * database; a job over the limit waits (status `waiting`) without spending an attempt. The key
   * is also the job's concurrency key: `concurrencyLimit` applies to it when given.
   */
  rateLimit?: RateLimit<StandardSchemaV1.InferInput<S>> | null | undefined;
  /** Stable name stored with each job; keep it when renaming code so queued jobs still run. */
  type: string;
  /**
   * Any Standard Schema v1 validator (https://standardschema.dev): a zod 4 schema (from any copy
   * of zod), valibot, arktype... Producers pass its input type; the handler gets its output.
   */
  payload: S;
  handler: (
    payload: StandardSchemaV1.InferOutput<S>,
    ctx: JobContext,
  ) => Promise<unknown> | unknown;
}

export interface JobDefinition<S extends StandardSchemaV1 = StandardSchemaV1> {
  readonly type: string;
  readonly payload: S;
  readonly handler: (
    payload: StandardSchemaV1.InferOutput<S>,
    ctx: JobContext,
  ) => Promise<unknown> | unknown;
  readonly queue: string;
  readonly priority: number;
  readonly maxAttempts: number;
  readonly backoff: BackoffOptions;
  readonly timeoutMs: number | null;
  readonly leaseMs: number;
  readonly nonRetryable: readonly ErrorClass[];
  readonly onDead: JobOptions['onDead'];
  readonly concurrencyKey: ((payload: StandardSchemaV1.InferInput<S>) => string | null) | null;
  readonly concurrencyLimit: number;
  readonly singletonKey: ((payload: StandardSchemaV1.InferInput<S>) => string | null) | null;
  readonly singletonMode: SingletonMode;
  readonly singletonWindowMs: number | null;
  readonly singletonRunning: boolean;
  readonly rateLimit: { limit: number; intervalMs: number } | null;
  readonly trace: TraceMode;
}

/** The payload type a producer must pass when enqueueing a definition. */
export type PayloadOf<D> =
  D extends JobDefinition<infer S> ? StandardSchemaV1.InferInput<S> : never;

// Any definition, whatever its payload schema; used where definitions are collected.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyJobDefinition = JobDefinition<any>;

export function defineJob<S extends StandardSchemaV1>(
  input: JobDefinitionInput<S>,
): JobDefinition<S> {
  const type = parseConfig('job type', queueName, input.type);
  const options = parseConfig(`options of job type "${type}"`, jobOptionsSchema, input);
  const problem = standardSchemaProblem(input.payload);
  if (problem) {
    throw new TypeError(
      `job type "${type}": payload must be a Standard Schema v1 validator (a zod 4, valibot or ` +
        `arktype schema, or any object with a \`~standard\` property): ${problem}`,
    );
  }
  const shape = findSchemaJsonProblem(input.payload, 'payload');
  if (shape) {
    throw new ConfigError(
      `job type "${type}": ${shape.path}: ${shape.message} (payloads are stored as JSON)`,
    );
  }
  if (typeof input.handler !== 'function') {
    throw new TypeError(`job type "${type}": handler must be a function`);
  }
  // Checked here, not at the first failure: a non-class in nonRetryable made the failure's
  // decision throw (`instanceof`), so the attempt was never settled and its slot never freed, and
  // an onDead that is no function rolled back every kill of the job, which then stayed processing
  // (found by an audit).
  const nonRetryable: unknown = input.nonRetryable ?? [];
  if (!Array.isArray(nonRetryable)) {
    throw new TypeError(
      `job type "${type}": nonRetryable must be an array of error classes, not ${kindOf(nonRetryable)}`,
    );
  }
  const notClass = nonRetryable.findIndex((cls) => typeof cls !== 'function');
  if (notClass !== -1) {
    throw new TypeError(
      `job type "${type}": nonRetryable[${notClass}] must be an error class, not ${kindOf(nonRetryable[notClass])}`,
    );
  }
  if (input.onDead != null && typeof input.onDead !== 'function') {
    throw new TypeError(
      `job type "${type}": onDead must be a function (tx, job) => Promise<void>, not ${kindOf(input.onDead)}`,
    );
  }
  if (input.singletonKey != null && typeof input.singletonKey !== 'function') {
    throw new TypeError(
      `job type "${type}": singletonKey must be a function of the payload returning a string`,
    );
  }
  if (options.singletonMode === 'throttle' && options.singletonWindowMs == null) {
    throw new ConfigError(`job type "${type}": singletonMode "throttle" needs singletonWindowMs`);
  }
  const rateLimit = input.rateLimit ?? null;
  if (rateLimit?.key != null && typeof rateLimit.key !== 'function') {
    throw new TypeError(`job type "${type}": rateLimit.key must be a function of the payload`);
  }
  if (rateLimit?.key != null && input.concurrencyKey != null) {
    throw new ConfigError(
      `job type "${type}": give the key once, as rateLimit.key or as concurrencyKey (a rate ` +
        'limit counts the starts of the concurrency key)',
    );
  }
  if (input.concurrencyKey != null && typeof input.concurrencyKey !== 'function') {
    throw new TypeError(
      `job type "${type}": concurrencyKey must be a function of the payload returning a string`,
    );
  }
  return Object.freeze({
    type,
    payload: input.payload,
    handler: input.handler,
    queue: options.queue ?? 'default',
    priority: options.priority ?? 0,
    maxAttempts: options.maxAttempts ?? 5,
    backoff: backoffWith(options.backoff),
    timeoutMs: options.timeoutMs ?? null,
    leaseMs: options.leaseMs ?? DEFAULT_LEASE_MS,
    nonRetryable: [...(input.nonRetryable ?? [])],
    onDead: input.onDead,
    // A rate-limited type is admitted by its rate key: the concurrency key it shares.
    concurrencyKey:
      input.concurrencyKey ?? rateLimit?.key ?? (rateLimit ? () => `rate:${type}` : null),
    // Rate only: no cap on how many of the key run at once.
    concurrencyLimit:
      options.concurrencyLimit ?? (rateLimit && input.concurrencyKey == null ? 10_000 : 1),
    rateLimit: rateLimit ? { limit: rateLimit.limit, intervalMs: rateLimit.intervalMs } : null,
    singletonKey: input.singletonKey ?? null,
    singletonMode: options.singletonMode ?? 'keep',
    singletonWindowMs: options.singletonWindowMs ?? null,
    singletonRunning: options.singletonRunning ?? false,
    trace: options.trace ?? 'link',
  });
}

/** What a value that should have been a function or an array was, for an error message. */
const kindOf = (value: unknown): string =>
  value === null
    ? 'null'
    : typeof value === 'string'
      ? `the string "${value}"`
      : `a ${typeof value}`;

/**
 * Validates a payload against its definition and resolves to the schema's output; rejects with an
 * `InvalidPayloadError` naming every failing field. Async because a schema's validation may be.
 */
export async function validatePayload<S extends StandardSchemaV1>(
  definition: JobDefinition<S>,
  payload: unknown,
): Promise<StandardSchemaV1.InferOutput<S>> {
  const result = await runValidation(definition.payload, payload);
  if (result.issues) {
    throw new InvalidPayloadError(definition.type, issuesAt('payload', result.issues));
  }
  return result.value;
}
