import { sql } from 'drizzle-orm';

/** Advisory lock of the saga reconciler: two ints, apart from the queue's own namespace. */
export const RECONCILE_LOCK = { namespace: 0x5a6a, key: 1 } as const;

export function tryReconcileLock() {
  return sql`SELECT pg_try_advisory_xact_lock(${RECONCILE_LOCK.namespace}, ${RECONCILE_LOCK.key}) AS locked`;
}

export interface StrandedRow {
  id: string;
  job_status: string | null;
  last_error: string | null;
}

/**
 * Live sagas whose current job can no longer move them: dead without its dead-letter hook (the
 * sweeper killed it after its last lease expired, or no worker knew its type), cancelled by hand,
 * or gone. Locked so that one pass handles each once.
 */
export function selectStranded(limit: number) {
  return sql`
    SELECT s.id, j.status::text AS job_status, j.last_error
    FROM skiplock.sagas s
    LEFT JOIN skiplock.jobs j ON j.id = s.current_job_id
    WHERE s.status IN ('running', 'compensating') AND s.current_job_id IS NOT NULL
      AND (j.id IS NULL OR j.status IN ('dead', 'cancelled'))
    ORDER BY s.updated_at
    LIMIT ${limit}
    FOR UPDATE OF s SKIP LOCKED`;
}
