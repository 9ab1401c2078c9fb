import { sql, type SQL } from 'drizzle-orm';

/** The claim's lock token: a write for a job commits only if the job still carries it. */
export interface LockToken {
  id: string;
  attempt: number;
}

/**
 * The fence every write of a claimed job passes: still processing, still locked by this worker.
 * `'or completed'`: or completed already under this worker's name (see `completeBatchAgain`).
 */
export const fenced = (workerId: string, statuses: FencedStatuses = 'processing') =>
  sql`j.locked_by = ${workerId} AND j.status ${sql.raw(statuses === 'processing' ? "= 'processing'" : "IN ('processing', 'completed')")}`;

type FencedStatuses = 'processing' | 'or completed';

/**
 * Whether the job `id` names was claimed again after attempt `attempt` (its count passed it): for
 * another package's write made on the strength of one attempt, which must not land over what a
 * later attempt wrote. An operator's retry restarts the count with the job.
 */
export const claimedSince = (id: SQL, attempt: number) =>
  sql`EXISTS (SELECT 1 FROM skiplock.jobs later WHERE later.id = ${id} AND later.attempts > ${attempt}::int)`;

/** The fence for one job: its id, the attempt it was claimed for, and `fenced`. */
export const ownsToken = (workerId: string, token: LockToken) =>
  sql`j.id = ${token.id} AND j.attempts = ${token.attempt} AND ${fenced(workerId)}`;

/**
 * The fence for many jobs in one statement, with no join: `j.id = ANY(ids)` finds the rows through
 * the primary key, and each row's `id:attempt` is then looked up in the tokens, a hashed lookup for
 * a constant array. A join against `unnest(ids, attempts)` let the planner rescan the unnested
 * tokens once per row (100 × 100 comparisons per batch of 100), and on a table with stale
 * statistics drive the update from another index.
 */
export const ownsTokens = (
  workerId: string,
  tokens: readonly LockToken[],
  statuses: FencedStatuses = 'processing',
) =>
  sql`j.id = ANY(${arrayLiteral(tokens.map((t) => t.id))}::bigint[])
      AND (j.id::text || ':' || j.attempts::text) = ANY(${arrayLiteral(tokens.map((t) => `${t.id}:${t.attempt}`))}::text[])
      AND ${fenced(workerId, statuses)}`;

/**
 * An array parameter in PostgreSQL's literal form, for elements that need no quoting: a token's id
 * is bigint text and its key `id:attempt`, digits and a colon. node-postgres would quote and
 * escape each element of a JavaScript array (a new string per element: 5 % of the bytes a drain
 * allocates); joined here, an array of 500 ids is one string.
 */
const arrayLiteral = (elements: readonly string[]) => `{${elements.join(',')}}`;

/** What holds a job now, read after a fenced write of it found nothing to change. */
export interface JobHolderRow {
  status: string;
  attempt: number;
  /** The worker running it now; null unless `processing` (other statuses keep the last one). */
  holder: string | null;
  /**
   * The lease a run an operator stopped kept (`cancelled` with a lease, see `releaseStoppedRun`),
   * as `leaseMicros` reads it: what that run's release is fenced by. Null otherwise.
   */
  stopped_lease: string | null;
}

/**
 * A lease as microseconds since the epoch, in text: exact, where a JavaScript Date keeps
 * milliseconds only and the text of a timestamp depends on the session's DateStyle.
 */
export const leaseMicros = (column: SQL) => sql`(extract(epoch FROM ${column}) * 1000000)::bigint`;

/**
 * A cancelled job whose run an operator stopped still holds the lease it kept (its handler has
 * not returned, and the lease has not run out): its row holds its concurrency key's slot, it is
 * not retried (the retried job could run beside it), not deleted by retention, and a saga waits
 * for it before compensating. `table` qualifies the columns where a statement joins.
 */
export const stoppedRunHolds = (table: 'j' | 'jobs') => {
  const t = sql.raw(table);
  return sql`(${t}.status = 'cancelled' AND coalesce(${t}.lease_expires_at > now(), false))`;
};

export function selectJobHolder(id: string) {
  return sql`
    SELECT status, attempts AS attempt,
           CASE WHEN status = 'processing' THEN locked_by END AS holder,
           CASE WHEN status = 'cancelled' THEN ${leaseMicros(sql`lease_expires_at`)}::text
           END AS stopped_lease
    FROM skiplock.jobs WHERE id = ${id}`;
}
