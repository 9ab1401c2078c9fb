import { sql } from 'drizzle-orm';
import {
  bigint,
  bigserial,
  boolean,
  check,
  index,
  integer,
  jsonb,
  pgSchema,
  primaryKey,
  text,
  timestamp,
  unique,
  uniqueIndex,
} from 'drizzle-orm/pg-core';

// The same `skiplock` schema the queue's tables live in (drizzle-kit merges schemas by name).
const skiplock = pgSchema('skiplock');

/**
 * Saga lifecycle:
 * - `running`      a step's job is queued or running (`current_step`, `current_job_id`)
 * - `waiting`      a wait step is waiting for its signal (until the signal, its timeout, the
 *                  saga's deadline or a cancel)
 * - `compensating` a step failed for good (or cancel/deadline); completed steps are being undone
 *                  in reverse order, one compensation job at a time (`current_step` is the step
 *                  being compensated)
 * - `completed`    every step succeeded (terminal)
 * - `compensated`  a step failed for good and every completed step was compensated (terminal)
 * - `cancelled`    `cancel()` stopped the saga and every completed step was compensated (terminal)
 * - `failed`       needs an operator: a compensation failed for good, a step after the pivot
 *                  failed for good, or no worker knows the saga's definition; `error` says which
 *                  (terminal)
 * - `queued`       started while another saga of its definition held its lock key (`lockKey`);
 *                  nothing has run yet, it starts when every saga before it with the key has
 *                  finished. Last in the enum: PostgreSQL appends a new enum value.
 */
export const sagaStatus = skiplock.enum('saga_status', [
  'running',
  'waiting',
  'compensating',
  'completed',
  'compensated',
  'cancelled',
  'failed',
  'queued',
]);

/** A history row is either a step or the compensation of a step. */
export const sagaStepKind = skiplock.enum('saga_step_kind', ['step', 'compensation']);

/**
 * Step (and compensation) lifecycle:
 * - `pending`   its job is queued and no attempt has ended. Such a step has no row unless a
 *               compensation was re-entered or an operator's retry reopened it: a row is
 *               written when the step ends, starts waiting or an attempt fails, and `getSaga`
 *               shows the step the saga is on from its pointer (`current_since`, the job), as
 *               `running` while its job is worked on, with the job's attempt and claim time
 * - `running`   an attempt failed and another is due; `attempts` counts the attempts that
 *               ended, `error` holds the last failed one
 * - `waiting`   a wait step found no signal yet and waits for it
 * - `completed` it succeeded; `output` holds its recorded result (terminal)
 * - `failed`    it failed for good: retries exhausted, non-retryable error, timeout, signal
 *               timeout or the saga's deadline; `error` says why (terminal)
 * - `cancelled` `cancel()` stopped it before it ran or while it waited (terminal)
 */
export const sagaStepStatus = skiplock.enum('saga_step_status', [
  'pending',
  'running',
  'waiting',
  'completed',
  'failed',
  'cancelled',
]);

export type SagaStatus = (typeof sagaStatus.enumValues)[number];
export type SagaStepKind = (typeof sagaStepKind.enumValues)[number];
export type SagaStepStatus = (typeof sagaStepStatus.enumValues)[number];

export const sagas = skiplock.table(
  'sagas',
  {
    /** Chosen by the caller; starting twice with the same id is one saga. */
    id: text('id').primaryKey(),
    name: text('name').notNull(),
    version: integer('version').notNull(),
    status: sagaStatus('status').notNull().default('running'),
    input: jsonb('input').notNull(),
    currentStep: text('current_step'),
    currentKind: sagaStepKind('current_kind'),
    /** The queue job of the current step or compensation; the reconciler watches it. */
    currentJobId: bigint('current_job_id', { mode: 'bigint' }),
    /**
     * When the saga reached its current step or compensation. A step's history row is written
     * when the step ends (or waits, or an attempt fails), not when it is reached: until then
     * `getSaga` shows the step from this pointer and its job, and the row takes its `created_at`
     * from here. Set by the same HOT update that moves the pointer.
     */
    currentSince: timestamp('current_since', { withTimezone: true }),
    /** Set once the pivot step completed: from then on the saga can no longer compensate. */
    pivoted: boolean('pivoted').notNull().default(false),
    /** `cancel()` arrived while a step was running; acted on when that step settles. */
    cancelRequested: boolean('cancel_requested').notNull().default(false),
    deadline: timestamp('deadline', { withTimezone: true }),
    error: text('error'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
    finishedAt: timestamp('finished_at', { withTimezone: true }),
    /**
     * The OpenTelemetry span context of the saga's start (W3C `traceparent` / `tracestate`): the
     * trace every step, compensation, signal and cancel of the saga joins. NULL when untraced.
     */
    traceParent: text('trace_parent'),
    traceState: text('trace_state'),
    /**
     * The definition's `lockKey` of the input, when it has one: at most one saga per name and key
     * is active (`running`, `waiting`, `compensating`); later starts queue behind it (`queued`)
     * or are refused. Never changes, so it keeps the pointer updates HOT.
     */
    lockKey: text('lock_key'),
    /**
     * A child saga's parent and the parent's step that started it (`.child()`); the child's end
     * moves that step on, in the child's ending transaction. Null for a saga started by `start`.
     */
    parentId: text('parent_id'),
    parentStep: text('parent_step'),
  },
  (t) => [
    index('sagas_status_created_idx').on(t.status, t.createdAt, t.id),
    index('sagas_name_created_idx').on(t.name, t.createdAt, t.id),
    index('sagas_created_idx').on(t.createdAt, t.id),
    // Reconciler path: waiting sagas by deadline. No index covers current_job_id, which every
    // step changes: one would make each pointer update non-HOT (see migration 0001).
    index('sagas_waiting_deadline_idx')
      .on(t.deadline)
      .where(sql`status = 'waiting' AND deadline IS NOT NULL`),
    check('sagas_version_check', sql`version >= 1`),
    // The rule itself: a second active saga with one name and key cannot be written, whatever
    // the code above does. Sagas without a key are not in it (or in the next index) at all.
    uniqueIndex('sagas_lock_key_active_idx')
      .on(t.name, t.lockKey)
      .where(sql`lock_key IS NOT NULL AND status IN ('running', 'waiting', 'compensating')`),
    // A key's holder and its queue in start order (status first, so the reconciler can also find
    // every queued saga). Its predicate does not name 'queued': a new enum value cannot be used
    // in the transaction that adds it, and one transaction applies the migrations.
    // A parent's children, for getSaga's tree and a cancel's way down.
    index('sagas_parent_idx')
      .on(t.parentId)
      .where(sql`parent_id IS NOT NULL`),
    index('sagas_lock_key_idx')
      .on(t.status, t.name, t.lockKey, t.createdAt, t.id)
      .where(sql`lock_key IS NOT NULL`),
  ],
);

export const sagaSteps = skiplock.table(
  'saga_steps',
  {
    /** Orders the history: a row is created when its step ends (or waits, or an attempt fails), which for the steps of one saga is the order it reached them. */
    id: bigserial('id', { mode: 'bigint' }).primaryKey(),
    sagaId: text('saga_id')
      .notNull()
      .references(() => sagas.id, { onDelete: 'cascade' }),
    step: text('step').notNull(),
    kind: sagaStepKind('kind').notNull(),
    status: sagaStepStatus('status').notNull().default('pending'),
    attempts: integer('attempts').notNull().default(0),
    jobId: bigint('job_id', { mode: 'bigint' }),
    output: jsonb('output'),
    error: text('error'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    startedAt: timestamp('started_at', { withTimezone: true }),
    finishedAt: timestamp('finished_at', { withTimezone: true }),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [unique('saga_steps_saga_kind_step_unique').on(t.sagaId, t.kind, t.step)],
);

export const sagaSignals = skiplock.table(
  'saga_signals',
  {
    sagaId: text('saga_id')
      .notNull()
      .references(() => sagas.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    /** The first delivery's payload; later deliveries of the same name are ignored. */
    payload: jsonb('payload').notNull(),
    receivedAt: timestamp('received_at', { withTimezone: true }).notNull().defaultNow(),
    /** When a wait step took it; null while it waits for its step. */
    consumedAt: timestamp('consumed_at', { withTimezone: true }),
  },
  (t) => [primaryKey({ name: 'saga_signals_pk', columns: [t.sagaId, t.name] })],
);
