import type { SQL } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import type pg from 'pg';

/** The plan PostgreSQL ran for a drizzle query, with actual row counts and no timings or costs. */
export async function explainAnalyze(pool: pg.Pool, query: SQL): Promise<string> {
  const q = new PgDialect().sqlToQuery(query);
  const { rows } = await pool.query<{ 'QUERY PLAN': string }>(
    `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) ${q.sql}`,
    q.params,
  );
  return rows.map((r) => r['QUERY PLAN']).join('\n');
}

/** The most rows any scan node of the plan returned plus removed by its own filter. */
export function rowsExamined(plan: string): number {
  const lines = plan.split('\n');
  let most = 0;
  lines.forEach((line, i) => {
    if (!/Scan/.test(line)) return;
    const actual = Number(/actual rows=(\d+)/.exec(line)?.[1] ?? 0);
    // The node's own detail lines run until the next node (`->`).
    let removed = 0;
    for (const detail of lines.slice(i + 1)) {
      if (detail.includes('->')) break;
      removed += Number(/Rows Removed by Filter: (\d+)/.exec(detail)?.[1] ?? 0);
    }
    most = Math.max(most, actual + removed);
  });
  return most;
}
