import { sql, type SQL } from 'drizzle-orm';
import { commitItem } from './commit.js';

export interface ClaimedRow {
  id: string;
  queue: string;
  job_type: string;
  payload: unknown;
  attempts: number;
  max_attempts: number;
  priority: number;
  timeout_ms: number | null;
  lease_ms: number;
  idempotency_key: string | null;
  /** Its slot is freed when the job settles; the worker then admits the key's next job. */
  concurrency_key: string | null;
  /**
   * Size of the payload's JSON text in bytes, for the prefetch buffer's byte bound. Not
   * `pg_column_size`: that is the compressed size on disk, and repetitive JSON compresses 5-20x.
   */
  payload_bytes?: number;
  /**
   * Seconds from the job's `run_at` to this claim, in the database's clock (so host clocks do not
   * matter). Missing on rows that admission or a hand-off leased: they count from their lease.
   */
  lag_seconds?: number;
  /** The enqueue's span context (see tracing.ts), on claimed, handed-off and admitted rows. */
  trace_parent?: string | null;
  trace_state?: string | null;
  /** On claims with aging: the row came from the aged jobs, which go first (`inClaimOrder`). */
  aged?: boolean;
}

/**
 * Set on the connection the worker claims on (its LISTEN connection, see listener.ts): the claim
 * is planned once per connection, with a generic plan, instead of on every call. Left to the
 * default (`auto`), PostgreSQL plans each claim afresh for good: the generic plan's estimate
 * (`LIMIT $n` guessed at a tenth of the rows) costs it above the custom plans, though both run
 * the same index scans. Measured on the 2 M-row table, claim of 100 on one connection each, 50
 * claims interleaved: p50 1.64 ms generic, 1.92 custom and 1.90 auto; planning 0.31 ms of each
 * custom claim. The claim's generic plans are checked on a table never analyzed and on one full
 * of pending jobs (claim.test.ts).
 */
export const CLAIM_SESSION_SQL = 'SET plan_cache_mode = force_generic_plan';

export interface ClaimParams {
  queues: readonly string[];
  limit: number;
  workerId: string;
  /** Claimable jobs that waited longer than this go first, whatever their priority; null: never. */
  agingMs: number | null;
  /** Commit without waiting for the WAL flush (see `commitItem`). */
  asyncCommit: boolean;
}

/**
 * Claims up to `limit` jobs in one statement. The CTEs lock their rows with `FOR UPDATE SKIP
 * LOCKED`, so concurrent claims skip each other's rows instead of waiting, and act as a fence that
 * keeps the planner from updating more rows than it selected.
 *
 * Two CTEs implement priority with aging (design Q11) while each stays an ordered scan of a
 * partial index: `aged` takes the jobs that have been runnable for longer than `agingMs`, oldest
 * first; `fresh` fills the rest of the batch by priority desc, run_at, id. The UPDATE counts the
 * attempt and stamps the lock token (locked_by + attempts) that fences every later write. It
 * finds the picked rows with `id = ANY(ARRAY(...))`, always a primary-key lookup: joined to the
 * CTE instead, the planner guessed 10% of the table for `LIMIT <expression>` and, with fresh
 * statistics, hashed a sequential scan of the whole table on every claim (15 ms at 20,000 jobs).
 */
export function claimJobs(params: ClaimParams) {
  const claimable = sql`j.status IN ('pending', 'retryable')`;
  // Each marker selects one index, and only it (see jobs_claim_idx in schema.ts).
  const claimIndexed = sql`j.lease_expires_at IS NULL`;
  const agingIndexed = sql`j.completed_at IS NULL`;
  const picked =
    params.agingMs === null
      ? sql`
        picked AS (
          ${perQueue(params, sql`${claimable} AND ${claimIndexed} AND j.run_at <= now()`, 'priority')}
        )`
      : sql`
        aged AS (
          ${perQueue(
            params,
            sql`${claimable} AND ${agingIndexed}
                AND j.run_at <= now() - ${params.agingMs} * interval '1 millisecond'`,
            'age',
          )}
        ),
        fresh AS (
          ${perQueue(
            params,
            sql`${claimable} AND ${claimIndexed} AND j.run_at <= now()
                AND j.id NOT IN (SELECT id FROM aged)`,
            'priority',
            sql`${params.limit} - (SELECT count(*) FROM aged)`,
          )}
        ),
        picked AS (SELECT id FROM aged UNION ALL SELECT id FROM fresh)`;
  // With aging, each row says whether it came from `aged`, for `inClaimOrder`.
  const aged = params.agingMs === null ? sql`` : sql`, c.id IN (SELECT id FROM aged) AS aged`;
  return sql`
    WITH ${picked},
    claimed AS (
      UPDATE skiplock.jobs j
      SET status = 'processing',
          attempts = j.attempts + 1,
          locked_by = ${params.workerId},
          locked_at = now(),
          lease_expires_at = now() + j.lease_ms * interval '1 millisecond',
          -- A started job no longer holds its singleton key (unless it asked to keep it while it
          -- runs): the next one may queue, and a retry of this one never collides with it.
          singleton_key = CASE WHEN j.singleton_running THEN j.singleton_key END,
          updated_at = now()
      FROM ${commitItem(params.asyncCommit)}
      WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
      RETURNING j.id, j.queue, j.job_type, j.payload, j.attempts, j.max_attempts,
                j.priority, j.run_at, j.timeout_ms, j.lease_ms, j.idempotency_key,
                j.concurrency_key, octet_length(j.payload::text) AS payload_bytes,
                j.trace_parent, j.trace_state
    )
    SELECT c.id::text AS id, c.queue, c.job_type, c.payload, c.attempts, c.max_attempts,
           c.priority, c.timeout_ms, c.lease_ms, c.idempotency_key, c.concurrency_key,
           c.payload_bytes, c.trace_parent, c.trace_state, GREATEST(0, extract(epoch FROM now() - c.run_at))::float8 AS lag_seconds${aged}
    FROM claimed c`;
}

/**
 * Puts a claimed batch in claim order, in place: aged jobs first, oldest first; then priority
 * desc, run_at, id. Rows come back from the claim's `id = ANY(...)` in id order, and the worker
 * starts them in the order it holds them. Sorted here rather than by an ORDER BY in the claim,
 * whose sort and two subplans over `aged` cost more than this sort of rows mostly in order
 * already: the claim of 500 on the 2 M-row table went from 6.73 to 6.39 ms at p50, the claim of
 * 100 from 1.95-2.01 to 1.87-1.96 ms (both statements prepared, interleaved on one connection,
 * 60 claims each).
 * `lag_seconds` stands in for run_at: every claimed row's run_at is at or before the claim's
 * `now()`, so more lag is an earlier run_at.
 */
export function inClaimOrder(rows: ClaimedRow[]): ClaimedRow[] {
  return rows.sort(
    (a, b) =>
      Number(b.aged === true) - Number(a.aged === true) ||
      (a.aged === true ? 0 : b.priority - a.priority) ||
      (b.lag_seconds ?? 0) - (a.lag_seconds ?? 0) ||
      a.id.length - b.id.length ||
      (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
  );
}

/**
 * Selects and locks up to `limit` claimable rows of the worker's queues, best first.
 *
 * With one queue this is one ordered scan of a partial index that stops after `limit` rows. With
 * several, `queue = ANY(...)` would make PostgreSQL read and sort every claimable row of those
 * queues (measured: 35 ms per claim with 20,000 pending), so each queue gets its own ordered,
 * limited scan in a LATERAL subquery and only their union of at most `limit` rows per queue is
 * sorted. Rows locked there but not picked are unlocked when the statement commits.
 */
function perQueue(
  params: ClaimParams,
  where: SQL,
  order: 'priority' | 'age',
  limit: SQL | number = params.limit,
) {
  const orderBy =
    order === 'priority' ? sql`priority DESC NULLS LAST, run_at, id` : sql`run_at, id`;
  if (params.queues.length === 1) {
    return sql`
      SELECT j.id FROM skiplock.jobs j
      WHERE ${where} AND j.queue = ${params.queues[0]}
      ORDER BY ${orderBy}
      LIMIT ${limit}
      FOR UPDATE SKIP LOCKED`;
  }
  return sql`
    SELECT c.id FROM unnest(${sql.param(params.queues)}::text[]) AS q(name)
    CROSS JOIN LATERAL (
      SELECT j.id, j.priority, j.run_at FROM skiplock.jobs j
      WHERE ${where} AND j.queue = q.name
      ORDER BY ${orderBy}
      LIMIT ${limit}
      FOR UPDATE SKIP LOCKED
    ) c
    ORDER BY ${order === 'priority' ? sql`c.priority DESC NULLS LAST, c.run_at, c.id` : sql`c.run_at, c.id`}
    LIMIT ${limit}`;
}
