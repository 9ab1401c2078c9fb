import { sql } from 'drizzle-orm';
import type { SagaStepKind, SagaStepStatus } from '../schema.js';

/** Longest error message kept on a saga or step row. */
export const MAX_ERROR_LENGTH = 2_000;

export const clip = (message: string) => message.slice(0, MAX_ERROR_LENGTH);

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

const attemptSet = (a: AttemptMark) => {
  // Never after the transaction's start, which is what `finished_at` records: a wait for the saga
  // row's lock would otherwise put the start after the finish.
  const start =
    'startedAgoMs' in a
      ? sql`least(clock_timestamp() - ${a.startedAgoMs}::float8 * interval '1 millisecond', now())`
      : sql`${a.startedAt}::timestamptz`;
  return sql`
    attempts = greatest(attempts, ${a.attempt}), started_at = coalesce(started_at, ${start}),`;
};

/** Keeps the last failed attempt's error on a step still in progress (history only). */
export function recordAttemptError(p: {
  sagaId: string;
  step: string;
  kind: SagaStepKind;
  message: string;
  attempt: AttemptMark;
}) {
  return sql`
    UPDATE skiplock.saga_steps
    SET status = 'running', ${attemptSet(p.attempt)} error = ${clip(p.message)}, updated_at = now()
    WHERE saga_id = ${p.sagaId} AND step = ${p.step} AND kind = ${p.kind}::skiplock.saga_step_kind
      AND status IN ('pending', 'running')`;
}

export interface SettleParams {
  sagaId: string;
  step: string;
  kind: SagaStepKind;
  status: SagaStepStatus;
  outputJson?: string | null | undefined;
  error?: string | null | undefined;
  /** The attempt that ends here, when one ran (see `AttemptMark`). */
  attempt?: AttemptMark | undefined;
}

/** The SET list that settles a step row; shared with the fenced completion in `sql/sagas.ts`. */
export function settleSet(p: Omit<SettleParams, 'sagaId' | 'step' | 'kind'>) {
  return sql`
    status = ${p.status}::skiplock.saga_step_status, ${p.attempt ? attemptSet(p.attempt) : sql``}
    output = coalesce(${p.outputJson ?? null}::jsonb, output),
    error = ${p.error === undefined || p.error === null ? null : clip(p.error)},
    finished_at = CASE WHEN ${p.status} IN ('completed', 'failed', 'cancelled')
                       THEN now() ELSE finished_at END,
    updated_at = now()`;
}

export function settleStep(p: SettleParams) {
  return sql`
    UPDATE skiplock.saga_steps SET ${settleSet(p)}
    WHERE saga_id = ${p.sagaId} AND step = ${p.step} AND kind = ${p.kind}::skiplock.saga_step_kind`;
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
