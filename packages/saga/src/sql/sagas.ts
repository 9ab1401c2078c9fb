import { sql, type SQL } from 'drizzle-orm';
import type { SagaStatus, SagaStepKind } from '../schema.js';

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
  /** Milliseconds left until the deadline in the database clock; negative once passed. */
  deadline_left_ms: number | null;
  error: string | null;
}

const rowColumns = sql`
  id, name, version, status, input, current_step, current_kind, current_job_id::text AS current_job_id,
  pivoted, cancel_requested,
  (extract(epoch FROM deadline - now()) * 1000)::float8 AS deadline_left_ms, error`;

export function insertSaga(p: {
  id: string;
  name: string;
  version: number;
  inputJson: string;
  deadlineMs: number | null;
}) {
  return sql`
    INSERT INTO skiplock.sagas (id, name, version, status, input, deadline)
    VALUES (${p.id}, ${p.name}, ${p.version}, 'running', ${p.inputJson}::jsonb,
            now() + ${p.deadlineMs}::float8 * interval '1 millisecond')
    ON CONFLICT (id) DO NOTHING
    RETURNING id`;
}

export function selectSagaRow(id: string) {
  return sql`SELECT ${rowColumns} FROM skiplock.sagas WHERE id = ${id}`;
}

/** The saga row and the outputs of its completed steps, in one round trip before a step runs. */
export function selectSagaWithOutputs(id: string) {
  return sql`
    SELECT ${rowColumns},
           (SELECT coalesce(jsonb_object_agg(st.step, st.output), '{}'::jsonb)
            FROM skiplock.saga_steps st
            WHERE st.saga_id = s.id AND st.kind = 'step' AND st.status = 'completed') AS outputs
    FROM skiplock.sagas s WHERE s.id = ${id}`;
}

/** Locks a saga row for a transition: every writer of a saga's state goes through this lock. */
export function lockSaga(id: string) {
  return sql`SELECT ${rowColumns} FROM skiplock.sagas WHERE id = ${id} FOR UPDATE`;
}

/** Locks the live saga whose current job is `jobId` (the dead-letter path has only the job). */
export function lockSagaByJob(jobId: string) {
  return sql`
    SELECT ${rowColumns} FROM skiplock.sagas
    WHERE current_job_id = ${jobId} AND status IN ('running', 'compensating')
    FOR UPDATE`;
}

/** Points the saga at its next step or compensation job. */
export function pointSaga(p: {
  id: string;
  status: 'running' | 'compensating';
  step: string;
  kind: SagaStepKind;
  jobId: string;
}) {
  return sql`
    UPDATE skiplock.sagas
    SET status = ${p.status}::skiplock.saga_status, current_step = ${p.step},
        current_kind = ${p.kind}::skiplock.saga_step_kind, current_job_id = ${p.jobId}::bigint,
        updated_at = now()
    WHERE id = ${p.id}`;
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

/** Ends a saga: terminal status, no current step, finish time. */
export function finishSaga(id: string, status: SagaStatus, error: string | null | undefined) {
  return sql`
    UPDATE skiplock.sagas
    SET status = ${status}::skiplock.saga_status, current_step = NULL, current_kind = NULL,
        current_job_id = NULL, error = CASE WHEN ${error === undefined} THEN error ELSE ${error ?? null} END,
        finished_at = now(), updated_at = now()
    WHERE id = ${id}`;
}
