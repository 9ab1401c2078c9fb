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
