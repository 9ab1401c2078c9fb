import { sql, type SQL } from 'drizzle-orm';
import type { SagaStatus } from '../schema.js';

export interface SagaReadRow {
  id: string;
  name: string;
  version: number;
  status: SagaStatus;
  input: unknown;
  current_step: string | null;
  current_kind: 'step' | 'compensation' | null;
  current_job_id: string | null;
  pivoted: boolean;
  cancel_requested: boolean;
  deadline: Date | null;
  error: string | null;
  created_at: Date;
  updated_at: Date;
  finished_at: Date | null;
  /** Exact creation time as text, for keyset cursors (a JS Date drops microseconds). */
  created_key: string;
}

const readColumns = sql`
  id, name, version, status, input, current_step, current_kind, current_job_id::text AS current_job_id,
  pivoted, cancel_requested, deadline, error, created_at, updated_at, finished_at,
  created_at::text AS created_key`;

export function selectSaga(id: string) {
  return sql`SELECT ${readColumns} FROM skiplock.sagas WHERE id = ${id}`;
}

export interface SagaListFilter {
  statuses?: readonly SagaStatus[] | undefined;
  name?: string | undefined;
  limit: number;
  /** Keyset: only sagas created before this (created_at, id). */
  after?: { createdKey: string; id: string } | undefined;
}

/** Newest first, paged by (created_at, id) so pages stay stable while sagas are added. */
export function selectSagas(filter: SagaListFilter) {
  const where: SQL[] = [sql`true`];
  if (filter.statuses?.length) {
    where.push(sql`status = ANY(${sql.param(filter.statuses)}::skiplock.saga_status[])`);
  }
  if (filter.name) where.push(sql`name = ${filter.name}`);
  if (filter.after) {
    where.push(
      sql`(created_at, id) < (${filter.after.createdKey}::timestamptz, ${filter.after.id})`,
    );
  }
  return sql`
    SELECT ${readColumns} FROM skiplock.sagas
    WHERE ${sql.join(where, sql` AND `)}
    ORDER BY created_at DESC, id DESC LIMIT ${filter.limit}`;
}
