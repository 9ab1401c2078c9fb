import type pg from 'pg';

/**
 * The pid of the worker process holding the most running jobs, read from the jobs' `locked_by`
 * (`<host>:<pid>:<id>`), so that a kill hits a worker in the middle of its work.
 */
export async function busiestWorkerPid(db: pg.Pool): Promise<number | null> {
  const { rows } = await db.query<{ locked_by: string; n: string }>(
    `SELECT locked_by, count(*) AS n FROM skiplock.jobs
      WHERE status = 'processing' AND locked_by IS NOT NULL
      GROUP BY locked_by ORDER BY count(*) DESC LIMIT 1`,
  );
  const match = rows[0] ? /:(\d+):[^:]*$/.exec(rows[0].locked_by) : null;
  return match ? Number(match[1]) : null;
}
