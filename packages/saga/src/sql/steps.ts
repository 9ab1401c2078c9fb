import { claimedSince, storableText } from '@skiplock/queue/engine';
import { sql, type SQL } from 'drizzle-orm';
import type { SagaStepKind, SagaStepStatus } from '../schema.js';

/** Longest error message kept on a saga or step row. */
export const MAX_ERROR_LENGTH = 2_000;

/** An error message as a saga or step row keeps it: no NUL (PostgreSQL's text holds none), clipped. */
export const clip = (message: string) => storableText(message).slice(0, MAX_ERROR_LENGTH);

/**
 * The attempt a history write records: its number, and how long ago it started by the worker's
 * monotonic clock, so that the start time lands in the database's clock as
 * `clock_timestamp() - ago` like every other time in the history (not `now()`, the transaction's
 * start, which would put it before the attempt's real start by the transaction's age). Nothing
 * is written when an attempt starts (that `running` mark was one row update per step, and the
 * job row already shows a running attempt; `read.ts` takes it from there); the attempt's end
 * records it instead.
 */
export type AttemptMark =
  | { attempt: number; startedAgoMs: number }
  /** When only the job knows (its last claim, read through the queue's engine): a dead job. */
  | { attempt: number; startedAt: Date | null };

// Never after the transaction's start, which is what `finished_at` records: a wait for the saga
// row's lock would otherwise put the start after the finish.
const attemptStart = (a: AttemptMark) =>
  'startedAgoMs' in a
    ? sql`least(clock_timestamp() - ${a.startedAgoMs}::float8 * interval '1 millisecond', now())`
    : sql`${a.startedAt}::timestamptz`;

const attemptSet = (a: AttemptMark) => sql`
  attempts = greatest(st.attempts, ${a.attempt}), started_at = coalesce(st.started_at, ${attemptStart(a)}),`;

/** A step's history row: one per saga, kind and step. */
export interface StepKey {
  sagaId: string;
  step: string;
  kind: SagaStepKind;
}

/** The step as a one-row relation `k`, the row a new history row is made of. */
export const stepRow = (k: StepKey) => sql`
  (SELECT ${k.sagaId}::text AS saga_id, ${k.step}::text AS step,
          ${k.kind}::skiplock.saga_step_kind AS kind) AS k`;

/**
 * The step with its saga as `s` while the saga is still on it (its pointer names it), where a new
 * history row takes its job and creation time from; else `s` is all NULL (no job, created now).
 */
const pointerAt = (k: StepKey) => sql`
  ${stepRow(k)} LEFT JOIN skiplock.sagas s
    ON s.id = k.saga_id AND s.current_step = k.step AND s.current_kind = k.kind`;

/**
 * Writes a step's history row: inserts it when the step has none yet, else updates it with
 * `update`. A step's row is written when the step ends, starts waiting or an attempt fails, not
 * when the saga reaches it: until then `getSaga` shows the step from the saga's pointer and its
 * job (as it already showed an attempt in progress), so a step costs one row write where it cost
 * an insert and an update. `source` is a FROM list with the step as `k` and its saga row as `s`
 * (see `pointerAt`); `where` filters it.
 */
function upsertHistory(p: {
  source: SQL;
  where?: SQL | undefined;
  insert: {
    status: SQL;
    attempts: SQL;
    output: SQL;
    error: SQL;
    startedAt: SQL;
    finishedAt: SQL;
  };
  update: SQL;
  /** Only rows this condition holds for are updated on conflict. */
  updateWhere?: SQL | undefined;
  /** A locking clause for `source`'s rows. */
  lock?: SQL | undefined;
  /** A RETURNING list of the written row `st`. */
  returning?: SQL | undefined;
}) {
  const i = p.insert;
  return sql`
    INSERT INTO skiplock.saga_steps AS st (saga_id, step, kind, status, attempts, job_id, output,
                                           error, created_at, started_at, finished_at)
    SELECT k.saga_id, k.step, k.kind, ${i.status}, ${i.attempts}, s.current_job_id::bigint,
           ${i.output},
           ${i.error}, coalesce(s.current_since, now()), ${i.startedAt}, ${i.finishedAt}
    FROM ${p.source} ${p.where ? sql`WHERE ${p.where}` : sql``} ${p.lock ?? sql``}
    ON CONFLICT (saga_id, kind, step) DO UPDATE SET ${p.update}
    ${p.updateWhere ? sql`WHERE ${p.updateWhere}` : sql``}
    ${p.returning ? sql`RETURNING ${p.returning}` : sql``}`;
}

/**
 * Keeps the last failed attempt's error on a step still in progress (history only). Written
 * without the saga's lock, so a new row is written only while the saga is still on the step,
 * and an ended row is left as it is. It first takes a key-share lock on the saga row, which the
 * new row's foreign key check would take anyway, but after the insert: holding the row while it
 * waited for a transaction that holds the saga's lock and settles this same row (a dead job's
 * hook, a completion) deadlocked the two. Now it waits for that one and sees what it wrote.
 */
export function recordAttemptError(p: StepKey & { message: string; attempt: AttemptMark }) {
  return upsertHistory({
    source: sql`${stepRow(p)} JOIN skiplock.sagas s
      ON s.id = k.saga_id AND s.current_step = k.step AND s.current_kind = k.kind`,
    // A record arrives after the attempt's end, so an earlier attempt's can come after a later
    // one's (its worker slow to write it after a timeout): it would put the earlier error over
    // the later one's. Fenced by the step's job, whose count restarts with an operator's retry
    // (the row's `attempts` does not: it keeps the most any run made).
    where: sql`s.status IN ('running', 'compensating')
      AND NOT ${claimedSince(sql`s.current_job_id::bigint`, p.attempt.attempt)}`,
    lock: sql`FOR KEY SHARE OF s`,
    insert: {
      status: sql`'running'::skiplock.saga_step_status`,
      attempts: sql`${p.attempt.attempt}::int`,
      output: sql`NULL::jsonb`,
      error: sql`${clip(p.message)}::text`,
      startedAt: attemptStart(p.attempt),
      finishedAt: sql`NULL::timestamptz`,
    },
    update: sql`status = 'running', ${attemptSet(p.attempt)} error = ${clip(p.message)}, updated_at = now()`,
    updateWhere: sql`st.status IN ('pending', 'running')`,
  });
}

export interface SettleParams extends StepKey {
  status: SagaStepStatus;
  outputJson?: string | null | undefined;
  error?: string | null | undefined;
  /** The attempt that ends here, when one ran (see `AttemptMark`). */
  attempt?: AttemptMark | undefined;
}

/** The SET list that settles an existing step row. */
function settleSet(p: Omit<SettleParams, keyof StepKey>) {
  return sql`
    status = ${p.status}::skiplock.saga_step_status, ${p.attempt ? attemptSet(p.attempt) : sql``}
    output = coalesce(${p.outputJson ?? null}::jsonb, st.output),
    error = ${p.error === undefined || p.error === null ? null : clip(p.error)},
    finished_at = CASE WHEN ${p.status} IN ('completed', 'failed', 'cancelled')
                       THEN now() ELSE st.finished_at END,
    updated_at = now()`;
}

/**
 * Settles a step's history row, inserting it when the step has none (see `upsertHistory`). `from`
 * replaces the step's saga found by its pointer: the fenced completion in `sql/sagas.ts` passes
 * its locked saga row, with the condition that it is still on the step.
 */
export function settleStep(
  p: SettleParams,
  from?: { source: SQL; where: SQL; returning?: SQL | undefined },
) {
  const terminal = ['completed', 'failed', 'cancelled'].includes(p.status);
  return upsertHistory({
    source: from?.source ?? pointerAt(p),
    where: from?.where,
    insert: {
      status: sql`${p.status}::skiplock.saga_step_status`,
      attempts: sql`${p.attempt?.attempt ?? 0}::int`,
      output: sql`${p.outputJson ?? null}::jsonb`,
      error: sql`${p.error === undefined || p.error === null ? null : clip(p.error)}::text`,
      startedAt: p.attempt ? attemptStart(p.attempt) : sql`NULL::timestamptz`,
      finishedAt: terminal ? sql`now()` : sql`NULL::timestamptz`,
    },
    update: settleSet(p),
    returning: from?.returning,
  });
}

/** Outputs of a saga's completed steps, for the context of later steps and compensations. */
export function selectOutputs(sagaId: string) {
  return sql`
    SELECT step, output FROM skiplock.saga_steps
    WHERE saga_id = ${sagaId} AND kind = 'step' AND status = 'completed'`;
}

export interface HistoryRow {
  step: string;
  kind: SagaStepKind;
  status: SagaStepStatus;
  attempts: number;
  job_id: string | null;
  output: unknown;
  error: string | null;
  created_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
}

export function selectHistory(sagaId: string) {
  return sql`
    SELECT step, kind, status, attempts, job_id::text AS job_id, output, error, created_at,
           started_at, finished_at
    FROM skiplock.saga_steps WHERE saga_id = ${sagaId} ORDER BY id`;
}

/** The histories of many sagas in one statement, for a page of `listSagas({ history: true })`. */
export function selectHistories(sagaIds: readonly string[]) {
  return sql`
    SELECT saga_id, step, kind, status, attempts, job_id::text AS job_id, output, error,
           created_at, started_at, finished_at
    FROM skiplock.saga_steps WHERE saga_id = ANY(${sql.param(sagaIds)}::text[]) ORDER BY saga_id, id`;
}
