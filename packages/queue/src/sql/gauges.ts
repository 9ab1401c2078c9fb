import { sql } from 'drizzle-orm';
import type { JobStatus } from '../schema.js';

/** One row of `sampleJobGauges`: a count, or (group `oldest`) a queue's oldest runnable age. */
export interface GaugeSampleRow {
  /** Which bounded scan the row comes from: its count is exact unless that scan hit the limit. */
  grp: 'claimable' | 'processing' | 'waiting' | 'completed' | 'dead' | 'cancelled' | 'oldest';
  queue: string;
  status: JobStatus | null;
  n: number | null;
  age_seconds: number | null;
}

/**
 * The counts behind the `skiplock_jobs` and `skiplock_oldest_runnable_age_seconds` gauges, in one
 * statement whose every scan reads at most `limit` index entries, whatever the table holds (a
 * count of 10 M completed jobs per scrape would read them all; this reads `limit`):
 *
 * - claimable (pending, retryable), per queue: an ordered index-only scan of `jobs_aging_idx`
 *   (queue, run_at, id) stopped at `limit`, then the status of those ids by primary key. The queues are the ones given plus those a skip scan of the same
 *   index finds (one probe per queue, at most `maxFound`). The same index gives each
 *   queue's oldest runnable job in one probe.
 * - waiting: the same two steps on `jobs_waiting_idx`; processing: `jobs_sweep_idx`; completed,
 *   dead, cancelled: a range of `jobs_retention_idx` each. One scan per status over every queue,
 *   grouped by queue.
 *
 * A scan that stops at `limit` counted only part of its rows (and, for the terminal states, the
 * oldest part): the caller replaces such counts with the planner's estimate (`estimateJobs`).
 * The other scans are one per status over every queue, so the queues they return are bounded
 * only by `limit`: the caller caps the series (see createJobGauges).
 * Each subquery carries the predicate of the partial index it is meant to read, so the planner
 * can prove the index applies (the claim's markers: see jobs_claim_idx in schema.ts), and orders
 * by that index's columns, so the scan is an ordered index scan that stops at the LIMIT. Without
 * the order, at 10 M rows the planner chose a sequential scan for `status = 'dead' LIMIT 10000`
 * (9.3 M rows read before the first dead one: 1.4 s) and bitmap scans, which read every matching
 * index entry before the LIMIT applies; even with it, a queue it believed small (55,000 claimable
 * jobs) got a bitmap scan and a sort. The ids come first, from an index-only scan (which no
 * bitmap scan can undercut), and then `id = ANY(ARRAY(...))`, a primary-key lookup each, as in
 * the claim (see claimJobs).
 */
export function sampleJobGauges(queues: readonly string[], limit: number, maxFound: number) {
  const claimable = sql`j.status IN ('pending', 'retryable') AND j.completed_at IS NULL`;
  const perStatus = (status: 'completed' | 'dead' | 'cancelled') => sql`
    SELECT ${status}::text, s.queue, ${status}::text, count(*)::int, NULL::float8
    FROM (SELECT j.queue FROM skiplock.jobs j WHERE j.status = ${status}::skiplock.job_status
          ORDER BY j.updated_at LIMIT ${limit}) s
    GROUP BY s.queue`;
  return sql`
    WITH RECURSIVE found AS (
      (SELECT j.queue, 1 AS depth FROM skiplock.jobs j WHERE ${claimable}
       ORDER BY j.queue LIMIT 1)
      UNION ALL
      SELECT (SELECT j.queue FROM skiplock.jobs j WHERE ${claimable} AND j.queue > f.queue
              ORDER BY j.queue LIMIT 1), f.depth + 1
      FROM found f WHERE f.queue IS NOT NULL AND f.depth < ${maxFound}
    ),
    queues AS (
      SELECT queue FROM found WHERE queue IS NOT NULL
      UNION
      SELECT unnest(${sql.param(queues)}::text[])
    )
    SELECT 'claimable' AS grp, q.queue, c.status::text AS status, c.n, NULL::float8 AS age_seconds
    FROM queues q CROSS JOIN LATERAL (
      SELECT j.status, count(*)::int AS n FROM skiplock.jobs j
      WHERE j.id = ANY(ARRAY(
              SELECT a.id FROM skiplock.jobs a
              WHERE a.status IN ('pending', 'retryable') AND a.completed_at IS NULL
                AND a.queue = q.queue
              ORDER BY a.run_at LIMIT ${limit}))
        AND ${claimable}
      GROUP BY j.status
    ) c
    UNION ALL
    SELECT 'oldest', q.queue, NULL, NULL,
           GREATEST(0, extract(epoch FROM now() - o.run_at))::float8
    FROM queues q CROSS JOIN LATERAL (
      SELECT j.run_at FROM skiplock.jobs j
      WHERE ${claimable} AND j.queue = q.queue AND j.run_at <= now()
      ORDER BY j.run_at LIMIT 1
    ) o
    UNION ALL
    SELECT 'processing', s.queue, 'processing', count(*)::int, NULL
    FROM (SELECT j.queue FROM skiplock.jobs j
          WHERE j.status = 'processing' AND j.lease_expires_at IS NOT NULL
          ORDER BY j.lease_expires_at LIMIT ${limit}) s
    GROUP BY s.queue
    UNION ALL
    SELECT 'waiting', j.queue, 'waiting', count(*)::int, NULL
    FROM skiplock.jobs j
    WHERE j.id = ANY(ARRAY(
            SELECT a.id FROM skiplock.jobs a WHERE a.status = 'waiting'
            ORDER BY a.concurrency_key LIMIT ${limit}))
      AND j.status = 'waiting'
    GROUP BY j.queue
    UNION ALL ${perStatus('completed')}
    UNION ALL ${perStatus('dead')}
    UNION ALL ${perStatus('cancelled')}`;
}

/**
 * The planner's estimate of the jobs of one queue and status: planning only, nothing is read
 * (`EXPLAIN` without `ANALYZE`). Used where a bounded count stopped at its limit. It rests on
 * the table's statistics (ANALYZE, run by autovacuum), so it is as fresh as they are.
 */
export function estimateJobs(queue: string, status: JobStatus) {
  return sql`EXPLAIN (FORMAT JSON)
    SELECT 1 FROM skiplock.jobs WHERE queue = ${queue} AND status = ${status}::skiplock.job_status`;
}
