import { sql } from 'drizzle-orm';
import {
  bigserial,
  boolean,
  check,
  index,
  integer,
  jsonb,
  pgSchema,
  text,
  timestamp,
  uniqueIndex,
} from 'drizzle-orm/pg-core';

/** Every library table lives in this schema so it never collides with the application's own. */
export const skiplockSchema = pgSchema('skiplock');

/**
 * Job lifecycle:
 * - `pending`    waiting to be claimed once `run_at` has passed (new jobs, released jobs)
 * - `processing` claimed by `locked_by` under a lease that expires at `lease_expires_at`
 * - `retryable`  an attempt failed; the job waits for its retry at `run_at` (claimable like
 *                pending). Named apart from a saga's terminal `failed`; it was `failed` before 0.1
 * - `completed`  the handler succeeded (terminal)
 * - `dead`       will never run again: attempts exhausted, invalid payload, unknown type, or a
 *                non-retryable error; `last_error` and `errors` say why (terminal, retry by hand)
 * - `cancelled`  cancelled by a user (terminal): before it ran, or stopped while it ran, whose run
 *                keeps its lease (and its concurrency slot) until its handler has returned
 *                (migrations-flow/0005_stopping_runs_hold_slots.sql)
 * - `waiting`    a job with a concurrency key, waiting for a slot of its key: not claimable until
 *                `skiplock.admit()` makes it pending (migrations-flow/0000_admission.sql)
 */
export const jobStatus = skiplockSchema.enum('job_status', [
  'pending',
  'processing',
  'retryable',
  'completed',
  'dead',
  'cancelled',
  'waiting',
]);

export type JobStatus = (typeof jobStatus.enumValues)[number];

export const jobs = skiplockSchema.table(
  'jobs',
  {
    id: bigserial('id', { mode: 'bigint' }).primaryKey(),
    queue: text('queue').notNull().default('default'),
    jobType: text('job_type').notNull(),
    payload: jsonb('payload').notNull().default({}),
    idempotencyKey: text('idempotency_key'),
    status: jobStatus('status').notNull().default('pending'),
    priority: integer('priority').notNull().default(0),
    attempts: integer('attempts').notNull().default(0),
    maxAttempts: integer('max_attempts').notNull().default(5),
    runAt: timestamp('run_at', { withTimezone: true }).notNull().defaultNow(),
    lockedAt: timestamp('locked_at', { withTimezone: true }),
    lockedBy: text('locked_by'),
    /** Visibility timeout: a processing job whose lease passed is taken back by the sweeper. */
    leaseExpiresAt: timestamp('lease_expires_at', { withTimezone: true }),
    leaseMs: integer('lease_ms').notNull().default(30_000),
    /** Per-attempt handler timeout; null means the job type has none. */
    timeoutMs: integer('timeout_ms'),
    lastError: text('last_error'),
    /** One entry per failed attempt: { attempt, reason, message, at }. Bounded by the settle SQL. */
    errors: jsonb('errors').notNull().default([]),
    completedAt: timestamp('completed_at', { withTimezone: true }),
    /**
     * At most `concurrency_limit` jobs of one key are admitted (pending, retryable or processing)
     * at a time, across every worker; the rest wait in status `waiting`. Keys span queues and job
     * types. The indexes and the admission function name the `waiting` value, which must be
     * committed before use, so they live in the second migration set (migrations-flow).
     */
    concurrencyKey: text('concurrency_key'),
    concurrencyLimit: integer('concurrency_limit'),
    /**
     * At most one queued (pending, retryable or waiting) job per (queue, singleton key): an
     * enqueue with a key already queued keeps that job or replaces its payload and run time.
     * With `singleton_running`, a processing job with the key (that asked the same) counts too,
     * and a run of one an operator stopped while it keeps its lease.
     * The unique indexes name `waiting`, so they live in migrations-flow.
     */
    /**
     * At most `rate_limit` starts of the job's concurrency key per `rate_interval_ms`, counted in
     * `skiplock.rate_starts`: such a job starts only when admission leases it to a worker.
     */
    rateLimit: integer('rate_limit'),
    rateIntervalMs: integer('rate_interval_ms'),
    singletonKey: text('singleton_key'),
    singletonRunning: boolean('singleton_running').notNull().default(false),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
    /**
     * The OpenTelemetry span context of the enqueue that made the job, as W3C `traceparent` and
     * `tracestate` header values; a run's span links to it (see tracing.ts). NULL when no tracer
     * recorded the enqueue, which costs no bytes: a NULL takes a bit of the row's null bitmap.
     */
    traceParent: text('trace_parent'),
    traceState: text('trace_state'),
  },
  (t) => [
    // Only keyed jobs are deduplicated, and only within their queue. Partial, so the many jobs
    // without a key cost no entry here, at insert or at any later (non-HOT) status update.
    uniqueIndex('jobs_queue_idempotency_key_unique')
      .on(t.queue, t.idempotencyKey)
      .where(sql`idempotency_key IS NOT NULL`),
    // Claim path: only claimable rows are indexed, so completed history never slows a claim.
    // Each of the two claim-side indexes carries a marker that only its own scan states, so the
    // planner cannot take one for the other on a table with stale statistics (it did: the claim
    // read the aging index and sorted every runnable row, 88 ms per claim; PostgreSQL 17 did the
    // reverse for the aging scan). The markers are nullable columns that the check below keeps
    // NULL on every claimable row: PostgreSQL 17 drops `IS NOT NULL` on NOT NULL columns before
    // matching partial indexes, so an always-true test on such a column would match nothing.
    index('jobs_claim_idx')
      .on(t.queue, t.priority.desc(), t.runAt, t.id)
      .where(sql`status IN ('pending', 'retryable') AND lease_expires_at IS NULL`),
    // Aging path: the oldest claimable rows regardless of priority.
    index('jobs_aging_idx')
      .on(t.queue, t.runAt, t.id)
      .where(sql`status IN ('pending', 'retryable') AND completed_at IS NULL`),
    // Sweep path: processing rows by lease expiry. `lease_expires_at IS NOT NULL` holds for every
    // processing row and follows from the sweep's `lease_expires_at < now()`; it keeps the fenced
    // settles (which say `status = 'processing'` but nothing about the lease) off this index. On a
    // table with stale statistics they used it and read every processing entry not yet vacuumed.
    index('jobs_sweep_idx')
      .on(t.leaseExpiresAt)
      .where(sql`status = 'processing' AND lease_expires_at IS NOT NULL`),
    // Retention path: terminal rows by age.
    index('jobs_retention_idx')
      .on(t.status, t.updatedAt)
      .where(sql`status IN ('completed', 'dead', 'cancelled')`),
    check(
      'jobs_claimable_unleased_check',
      sql`status NOT IN ('pending', 'retryable') OR (lease_expires_at IS NULL AND completed_at IS NULL)`,
    ),
    check('jobs_attempts_check', sql`attempts >= 0 AND max_attempts >= 1`),
    check('jobs_lease_ms_check', sql`lease_ms >= 1000`),
    check(
      'jobs_rate_limit_check',
      sql`(rate_limit IS NULL) = (rate_interval_ms IS NULL) AND (rate_limit IS NULL OR concurrency_key IS NOT NULL) AND rate_limit >= 1 AND rate_interval_ms >= 1`,
    ),
    check(
      'jobs_concurrency_check',
      sql`(concurrency_key IS NULL) = (concurrency_limit IS NULL) AND concurrency_limit >= 1`,
    ),
  ],
);

/**
 * One row per cron schedule (`defineSchedule`). Schedulers in every process upsert their
 * definitions here, lock a row with SKIP LOCKED to enqueue its due ticks (each under the key
 * `schedule:<name>:<tick>`, so a tick is one job however many schedulers race), and move
 * `last_tick_at` on in the same transaction. `paused` is the operator's switch.
 */
export const schedules = skiplockSchema.table('schedules', {
  name: text('name').primaryKey(),
  cron: text('cron').notNull(),
  timezone: text('timezone').notNull(),
  jobType: text('job_type').notNull(),
  queue: text('queue').notNull(),
  paused: boolean('paused').notNull().default(false),
  /** The latest tick handled (enqueued or skipped by the catch-up policy); the first row's is its creation. */
  lastTickAt: timestamp('last_tick_at', { withTimezone: true }).notNull(),
  /**
   * The on-time window (ms) of the schedulers that ran the recorded definition, the longest since
   * it was recorded (before migration 0018, of the one that moved the row last): how late its
   * ticks may be while one runs, which a process with another definition waits out before taking
   * the schedule over. Null when written by a version that did not record it.
   */
  onTimeMs: integer('on_time_ms'),
  /**
   * When a scheduler running the definition in `seenFor` last passed over the schedule, in its
   * pass's clock: moved at most every half on-time window, so a process that cannot judge the
   * recorded definition by its ticks (it cannot read its cron or time zone, or none is due) can
   * tell whether anything still runs it. Null when written by a version that did not record it.
   */
  seenAt: timestamp('seen_at', { withTimezone: true }),
  /**
   * The definition the scheduler that moved `seenAt` ran, `[cron, timezone, job_type, queue]`:
   * `seenAt` counts only while it is the recorded one, since a version that does not move
   * `seenAt` may record another definition and leave the last one's `seenAt` behind.
   */
  seenFor: jsonb('seen_for'),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
});

/**
 * One row per start of a rate-limited job, by its key, in the database clock at admission:
 * admission counts a key's rows within the limit's interval under the key's lock, so the limit
 * holds across every worker. Admitting a key deletes its rows older than its interval, and each
 * full admission pass deletes up to 1,000 rows older than a day (the longest interval).
 */
export const rateStarts = skiplockSchema.table(
  'rate_starts',
  {
    key: text('key').notNull(),
    startedAt: timestamp('started_at', { withTimezone: true }).notNull(),
  },
  (t) => [
    index('rate_starts_key_idx').on(t.key, t.startedAt),
    index('rate_starts_started_idx').on(t.startedAt),
  ],
);
