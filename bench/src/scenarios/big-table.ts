import pg from 'pg';
import { queueSystem } from '../systems/index.js';
import { freshDatabase, withAdmin } from '../server.js';

/**
 * The seed's production shape: most rows finished, a tail still pending. Rows are written
 * straight in SQL (the fastest way to 2 million rows), oldest first, then vacuumed and analyzed
 * as autovacuum would have done on a table that grew this large.
 */
const FILL: Record<string, (completed: number, total: number) => string> = {
  skiplock: (completed, total) => `
    INSERT INTO skiplock.jobs (queue, job_type, payload, status, attempts, run_at, completed_at,
                               created_at, updated_at)
    SELECT 'default', 'bench.noop', jsonb_build_object('i', g, 't', 0),
           CASE WHEN g <= ${completed} THEN 'completed' ELSE 'pending' END::skiplock.job_status,
           CASE WHEN g <= ${completed} THEN 1 ELSE 0 END,
           now() - interval '1 day' + g * interval '10 microseconds',
           CASE WHEN g <= ${completed} THEN now() - interval '1 hour' END,
           now() - interval '1 day', now() - interval '1 hour'
    FROM generate_series(1, ${total}) AS g`,
  bare: (completed, total) => `
    INSERT INTO bare.jobs (queue, job_type, payload, status, attempts, run_at, completed_at,
                           created_at, updated_at)
    SELECT 'default', 'noop', jsonb_build_object('i', g, 't', 0),
           CASE WHEN g <= ${completed} THEN 'completed' ELSE 'pending' END::bare.job_status,
           CASE WHEN g <= ${completed} THEN 1 ELSE 0 END,
           now() - interval '1 day' + g * interval '10 microseconds',
           CASE WHEN g <= ${completed} THEN now() - interval '1 hour' END,
           now() - interval '1 day', now() - interval '1 hour'
    FROM generate_series(1, ${total}) AS g`,
};

/** Which table a system drains: skiplock's variants (options of one worker) share skiplock's. */
export const tableOf = (systemId: string): string =>
  systemId.startsWith('skiplock') ? 'skiplock' : systemId;

/** Builds a template database holding the big table; each repetition clones it. */
export async function buildBigTable(
  adminUrl: string,
  systemId: string,
  rows: { completed: number; pending: number },
): Promise<{ template: string; drop: () => Promise<void> }> {
  const table = tableOf(systemId);
  const fill = FILL[table];
  if (!fill) throw new Error(`no big-table fill for ${systemId}`);
  const db = await freshDatabase(adminUrl);
  await (await queueSystem(table)).install(db.url);
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    await client.query(fill(rows.completed, rows.completed + rows.pending));
    await client.query('VACUUM ANALYZE');
  } finally {
    await client.end();
  }
  // A template must have no connections; the install may have left a pool closing.
  await withAdmin(adminUrl, (c) =>
    c.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [db.name]),
  );
  return { template: db.name, drop: db.drop };
}
