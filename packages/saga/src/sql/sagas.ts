import { sql, type SQL } from 'drizzle-orm';
import type { SagaStatus, SagaStepKind } from '../schema.js';
import { settleStep, stepRow, type AttemptMark } from './steps.js';

/** A saga row as the runtime needs it under its row lock. */
export interface SagaRow {
  id: string;
  name: string;
  version: number;
  status: SagaStatus;
  input: unknown;
  current_step: string | null;
  current_kind: SagaStepKind | null;
  current_job_id: string | null;
  pivoted: boolean;
  cancel_requested: boolean;
  /**
   * Milliseconds left until the deadline in the database clock at its transaction's start (as
   * timeout jobs are scheduled from `now()`); negative once passed.
   */
  deadline_left_ms: number | null;
  error: string | null;
  /** The saga's trace: its start span's context (see tracing.ts); null when untraced. */
  trace_parent: string | null;
  trace_state: string | null;
  /** The definition's lock key of the input (see `lockKey`), or null. */
  lock_key: string | null;
}

export const sagaRowColumns = sql`
  id, name, version, status, input, current_step, current_kind, current_job_id::text AS current_job_id,
  pivoted, cancel_requested,
  (extract(epoch FROM deadline - now()) * 1000)::float8 AS deadline_left_ms, error, trace_parent,
  trace_state, lock_key`;

export function insertSaga(p: {
  id: string;
  name: string;
  version: number;
  inputJson: string;
  deadlineMs: number | null;
  trace: { parent: string; state: string | null } | null;
  /** A child saga's parent and the parent's step that starts it. */
  parent?: { id: string; step: string } | undefined;
  /**
   * A definition's lock key, inserted under `lockKeyTurn`: `running` when the key was free, else
   * `queued`. Its start time is then the clock, not the transaction's start, so the queue's order
   * is the order the starts took the key.
   */
  lock?: { key: string; status: 'running' | 'queued' } | undefined;
  /** Return the inserted saga as `SagaRow` (for a first step handed off with it), not its id. */
  returnRow?: boolean | undefined;
}) {
  const extra = [
    ...(p.parent
      ? [
          [sql`parent_id`, sql`${p.parent.id}`],
          [sql`parent_step`, sql`${p.parent.step}`],
        ]
      : []),
    ...(p.lock
      ? [
          [sql`lock_key`, sql`${p.lock.key}`],
          [sql`created_at`, sql`clock_timestamp()`],
        ]
      : []),
  ];
  const columns = extra.map(([column]) => sql`, ${column}`);
  const values = extra.map(([, value]) => sql`, ${value}`);
  return sql`
    INSERT INTO skiplock.sagas (id, name, version, status, input, deadline, trace_parent,
                                trace_state${sql.join(columns)})
    VALUES (${p.id}, ${p.name}, ${p.version}, ${p.lock ? sql`${p.lock.status}::skiplock.saga_status` : sql`'running'`},
            ${p.inputJson}::jsonb, now() + ${p.deadlineMs}::float8 * interval '1 millisecond',
            ${p.trace?.parent ?? null}::text, ${p.trace?.state ?? null}::text${sql.join(values)})
    ON CONFLICT (id) DO NOTHING
    RETURNING ${p.returnRow ? sagaRowColumns : sql`id`}`;
}

/**
 * What a start that lost the id race needs: the existing saga's name and status, and whether its
 * stored input equals the new one as jsonb (key order and number spelling do not matter).
 */
export interface StartConflictRow {
  name: string;
  status: SagaStatus;
  same_input: boolean;
}

export function selectStartConflict(id: string, inputJson: string) {
  return sql`
    SELECT name, status, input = ${inputJson}::jsonb AS same_input
    FROM skiplock.sagas WHERE id = ${id}`;
}

/** The outputs of saga `sagaId`'s completed steps as one jsonb object by step name. */
const completedOutputs = (sagaId: SQL) => sql`
  (SELECT coalesce(jsonb_object_agg(st.step, st.output), '{}'::jsonb)
   FROM skiplock.saga_steps st
   WHERE st.saga_id = ${sagaId} AND st.kind = 'step' AND st.status = 'completed')`;

/**
 * Before an attempt runs: the saga row and the outputs of its completed steps, in one round trip.
 * A read only: the caller decides from the returned row whether the attempt may start, and the
 * fenced completion re-checks under the row lock. Nothing marks the attempt started: that mark
 * was one history row update per step, and an attempt in progress shows on its job row, which
 * `getSaga` reads (3-step saga: 21 -> 18 rows written per saga).
 */
export function loadAttempt(p: { sagaId: string }) {
  return sql`
    SELECT ${sagaRowColumns}, ${completedOutputs(sql`sagas.id`)} AS outputs
    FROM skiplock.sagas WHERE id = ${p.sagaId}`;
}

/** Locks a saga row for a transition: every writer of a saga's state goes through this lock. */
export function lockSaga(id: string) {
  return sql`SELECT ${sagaRowColumns} FROM skiplock.sagas WHERE id = ${id} FOR UPDATE`;
}

/** `lockSaga` only when no other transaction holds the row: no row otherwise. */
export function lockSagaIfFree(id: string) {
  return sql`SELECT ${sagaRowColumns} FROM skiplock.sagas WHERE id = ${id} FOR UPDATE SKIP LOCKED`;
}

/**
 * Locks the live saga whose current job is `jobId` (the dead-letter path has only the job). The
 * saga id comes from the job's idempotency key, so this is a primary-key lookup: an index on
 * `current_job_id` made every step's pointer update a non-HOT update that wrote a new entry in
 * each of the table's six indexes (0 of 4 updates per saga were HOT; see migration 0001). With
 * no saga id (a key that is not this runtime's), the lookup scans the live sagas instead.
 */
export function lockSagaOfJob(sagaId: string | null, jobId: string) {
  return sql`
    SELECT ${sagaRowColumns} FROM skiplock.sagas
    WHERE ${sagaId === null ? sql`true` : sql`id = ${sagaId}`}
      AND current_job_id = ${jobId} AND status IN ('running', 'compensating')
    FOR UPDATE`;
}

/**
 * The fenced completion's first saga statement: locks the saga row (as `lockSaga`) and, when the
 * saga is still on this step or compensation in `status`, records it `completed` with its output,
 * in one round trip. The caller checks the returned row the same way (`isCurrent`) and moves the
 * saga on, or calls the job stale; a saga that moved on has its history left untouched.
 *
 * The settle's snapshot is taken before the lock wait, which is safe: the attempt-error record
 * can insert or change the same history row without the saga lock, but the insert's conflict
 * check sees a row inserted since the snapshot (it waits for an insert in progress), READ
 * COMMITTED updates the newest version of a row changed since, and the conditions on the saga
 * row (held locked here) cannot change meanwhile.
 */
export function lockAndComplete(p: {
  sagaId: string;
  step: string;
  kind: SagaStepKind;
  status: SagaStatus;
  outputJson?: string | null | undefined;
  attempt: AttemptMark;
  /**
   * Also return `outputs`: every completed step's output, this one's included, as a read after
   * the commit would return them (see `SagaSnapshot`). The statement's snapshot does not see its
   * own settle, so this step's output comes from the settle's RETURNING.
   */
  outputs?: boolean;
}) {
  const settle = settleStep(
    { ...p, status: 'completed', outputJson: p.outputJson, attempt: p.attempt },
    {
      source: sql`${stepRow(p)} CROSS JOIN s`,
      where: sql`s.status = ${p.status}::skiplock.saga_status AND s.current_step = ${p.step}
                 AND s.current_kind = ${p.kind}::skiplock.saga_step_kind`,
      returning: p.outputs ? sql`st.step, st.output` : undefined,
    },
  );
  const outputs = p.outputs
    ? sql`, ${completedOutputs(sql`s.id`)}
            || coalesce((SELECT jsonb_object_agg(step, output) FROM settled), '{}'::jsonb) AS outputs`
    : sql``;
  return sql`
    WITH s AS (
      SELECT ${sagaRowColumns}, current_since FROM skiplock.sagas WHERE id = ${p.sagaId} FOR UPDATE
    ),
    settled AS (${settle})
    SELECT *${outputs} FROM s`;
}

/**
 * Points the saga at its next step or compensation (with its job) in one HOT update. No history
 * row is written here: the step's row is written when it ends (see `upsertHistory` in
 * `sql/steps.ts`; 3-step saga: 21.3 -> 18.3 rows written per saga); until then `getSaga` shows it
 * from this pointer. A row left by an earlier pass (a compensation re-entered) is reset to
 * `pending` with the new job, in the same round trip.
 */
export function enterRow(p: EnterRow & { jobId: string | null }) {
  const [history, pointer] = enterRowParts(p, sql`${p.jobId}::bigint`);
  return sql`WITH history AS (${history}) ${pointer}`;
}

export interface EnterRow {
  id: string;
  status: 'running' | 'compensating';
  step: string;
  kind: SagaStepKind;
  /** Null for a parallel group's step that its branches move, not a job (see `undoBranches`). */
  jobId: string | null;
}

/**
 * `enterRow`'s two updates with the job's id as an SQL expression: run by the queue in the
 * statement that inserts a handed-off job (`then` of `enqueueHandedOff`; the id is NULL there
 * when the key was taken, and then they change nothing), saving the pointer's own round trip.
 */
export function enterRowParts(p: Omit<EnterRow, 'jobId'>, jobId: SQL, guard = false): [SQL, SQL] {
  const given = guard ? sql` AND ${jobId} IS NOT NULL` : sql``;
  return [
    sql`
      UPDATE skiplock.saga_steps
      SET status = 'pending', job_id = ${jobId}, updated_at = now()
      WHERE saga_id = ${p.id} AND step = ${p.step} AND kind = ${p.kind}::skiplock.saga_step_kind${given}`,
    sql`
      UPDATE skiplock.sagas
      SET status = ${p.status}::skiplock.saga_status, current_step = ${p.step},
          current_kind = ${p.kind}::skiplock.saga_step_kind, current_job_id = ${jobId},
          current_since = now(), updated_at = now()
      WHERE id = ${p.id}${given}`,
  ];
}

export function setSagaStatus(id: string, status: SagaStatus) {
  return sql`
    UPDATE skiplock.sagas SET status = ${status}::skiplock.saga_status, updated_at = now()
    WHERE id = ${id}`;
}

export function setSagaFlags(
  id: string,
  flags: { pivoted?: true; cancelRequested?: boolean; error?: string },
) {
  const sets: SQL[] = [sql`updated_at = now()`];
  if (flags.pivoted) sets.push(sql`pivoted = true`);
  if (flags.cancelRequested !== undefined) {
    sets.push(sql`cancel_requested = ${flags.cancelRequested}`);
  }
  if (flags.error !== undefined) sets.push(sql`error = ${flags.error}`);
  return sql`UPDATE skiplock.sagas SET ${sql.join(sets, sql`, `)} WHERE id = ${id}`;
}

/**
 * Marks a saga without a pivot past its point of no return as it reaches its first retriable
 * step (see `moveOnAfter`), unless its deadline has passed: the step's start then compensates, as
 * for any step before that point. Returns a row when it marked the saga.
 */
export function passPointOfNoReturn(id: string) {
  return sql`
    UPDATE skiplock.sagas SET pivoted = true, updated_at = now()
    WHERE id = ${id} AND (deadline IS NULL OR deadline > now())
    RETURNING true AS pivoted`;
}

/**
 * What a saga's end returns: the lock key it may have held (for the next one's turn), and the
 * parent step a child saga's end moves on.
 */
export interface FinishedRow {
  id: string;
  name: string;
  error: string | null;
  lock_key: string | null;
  parent_id: string | null;
  parent_step: string | null;
}

/** Ends a saga: terminal status, no current step, finish time. */
export function finishSaga(id: string, status: SagaStatus, error: string | null | undefined) {
  return sql`
    UPDATE skiplock.sagas
    SET status = ${status}::skiplock.saga_status, current_step = NULL, current_kind = NULL,
        current_job_id = NULL, current_since = NULL, error = CASE WHEN ${error === undefined} THEN error ELSE ${error ?? null} END,
        finished_at = now(), updated_at = now()
    WHERE id = ${id}
    RETURNING id, name, error, lock_key, parent_id, parent_step`;
}

/** Why a saga compensates, as `failStep` wrote it (see `reopenSaga`). */
const compensationReason = sql`CASE WHEN cancel_requested THEN 'cancelled' ELSE (
          SELECT format('step "%s" failed: %s', f.step, f.error) FROM skiplock.saga_steps f
          WHERE f.saga_id = sagas.id AND f.kind = 'step' AND f.status = 'failed'
          ORDER BY f.finished_at DESC NULLS LAST LIMIT 1) END`;

/**
 * Reopens a `failed` saga at the step or compensation that failed it, for an operator's retry:
 * the history row goes back to `pending` (its error and finish time cleared, its attempts kept)
 * and the saga points at it again, running or compensating, no longer finished. A wait after the
 * pivot whose timeout failed the saga goes back to `waiting` instead.
 *
 * A compensation reopened gets back why the saga compensates, as `failStep` wrote it
 * (`cancelled`, or the step that failed with its error), since the compensation's failure
 * replaced it: the later compensations' `ctx.reason` and the saga's error at its end. Before,
 * they read `compensating` and a cancelled saga ended with no error (found by an audit). Other
 * causes (a parent's reason given to a child) are not kept anywhere and stay NULL.
 */
export function reopenSaga(p: {
  id: string;
  status: 'running' | 'compensating' | 'waiting';
  step: string;
  kind: SagaStepKind;
  jobId: string | null;
}) {
  const history = p.status === 'waiting' ? 'waiting' : 'pending';
  return sql`
    WITH history AS (
      UPDATE skiplock.saga_steps
      SET status = ${history}::skiplock.saga_step_status, error = NULL, finished_at = NULL,
          updated_at = now()
      WHERE saga_id = ${p.id} AND step = ${p.step} AND kind = ${p.kind}::skiplock.saga_step_kind
    )
    UPDATE skiplock.sagas
    SET status = ${p.status}::skiplock.saga_status, current_step = ${p.step},
        current_kind = ${p.kind}::skiplock.saga_step_kind, current_job_id = ${p.jobId}::bigint,
        current_since = now(), finished_at = NULL, updated_at = now(),
        error = ${p.kind === 'compensation' ? compensationReason : sql`NULL`}
    WHERE id = ${p.id} AND status = 'failed'`;
}

/**
 * Reopens a completed child saga for its parent's compensation: `compensating` again, no longer
 * finished, with the parent's reason as its error. The caller then starts its compensations.
 */
export function reopenForCompensation(id: string, reason: string) {
  return sql`
    UPDATE skiplock.sagas
    SET status = 'compensating', error = ${reason}, finished_at = NULL, updated_at = now()
    WHERE id = ${id} AND status = 'completed'`;
}

/**
 * A parent waits for its child's compensation (see `compensateChild`): it no longer points at its
 * compensation job, which has completed (and which retention may delete): the child's end moves
 * it on, and the reconciler looks for parents whose child ended unseen (`selectStrandedParents`).
 */
export function clearCurrentJob(id: string) {
  return sql`UPDATE skiplock.sagas SET current_job_id = NULL, updated_at = now() WHERE id = ${id}`;
}

/**
 * Locks the parent of saga `childId` (a child or a branch), if it has one: a child's parent is
 * fixed when the child is inserted, so reading it unlocked is safe.
 */
export function lockParentOf(childId: string) {
  return sql`
    SELECT p.id FROM skiplock.sagas p
    WHERE p.id = (SELECT c.parent_id FROM skiplock.sagas c WHERE c.id = ${childId})
    FOR UPDATE`;
}

/** An ended child saga, locked, with what its end needs to move its parent (`FinishedRow`). */
export function lockEndedChild(id: string) {
  return sql`
    SELECT id, name, error, lock_key, parent_id, parent_step, status FROM skiplock.sagas
    WHERE id = ${id} AND parent_id IS NOT NULL
      AND status IN ('completed', 'compensated', 'cancelled', 'failed')
    FOR UPDATE`;
}

/** A branch saga of a parallel group (see `branch.ts`), with its one step's output. */
export interface BranchRow {
  id: string;
  status: SagaStatus;
  error: string | null;
  output: unknown;
}

/**
 * The branch sagas of a parent's parallel step, in id order, with their steps' outputs. Read
 * under the parent's row lock, which every branch's end takes, so the last to end sees all the
 * others ended (each statement under READ COMMITTED sees what committed before it began).
 */
export function selectBranches(parentId: string, step: string) {
  return sql`
    SELECT c.id, c.status, c.error, o.output
    FROM skiplock.sagas c
    LEFT JOIN skiplock.saga_steps o
      ON o.saga_id = c.id AND o.kind = 'step' AND o.status = 'completed'
    WHERE c.parent_id = ${parentId} AND c.parent_step = ${step}
    ORDER BY c.id`;
}

/**
 * The database's clock, in epoch milliseconds: a sleep's wake time is turned into a delay by the
 * clock its wake job runs by. The worker's clock did it, so a worker running 10 minutes ahead
 * skipped a 20 s sleep (found in an audit). Read as a number and compared in JavaScript, which
 * holds any Date, where PostgreSQL refuses a timestamp past year 9999 as text (found in review).
 */
export function databaseNowMs() {
  return sql`SELECT (extract(epoch FROM now()) * 1000)::float8 AS now_ms`;
}
