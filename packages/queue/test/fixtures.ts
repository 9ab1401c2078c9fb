import { pino } from 'pino';
import type pg from 'pg';
import { createWorker, type AnyJobDefinition, type WorkerOptions } from '../src/index.js';

export const quiet = pino({ level: 'silent' });

/** Fast backoff so retry tests do not wait seconds. */
export const fastBackoff = { baseMs: 1, maxMs: 5, jitter: 0 };

/** A worker with background services off, so a test drives exactly what it means to. */
export function testWorker(
  pool: pg.Pool,
  jobs: AnyJobDefinition[],
  options: Partial<WorkerOptions> = {},
) {
  return createWorker({
    pool,
    jobs,
    logger: quiet,
    sweeper: false,
    retention: false,
    listen: false,
    ...options,
  });
}

export async function jobRow(pool: pg.Pool, id: string) {
  const { rows } = await pool.query<{
    status: string;
    attempts: number;
    run_at: Date;
    locked_by: string | null;
    last_error: string | null;
    errors: { attempt: number; reason: string; message: string }[];
  }>(
    'SELECT status, attempts, run_at, locked_by, last_error, errors FROM skiplock.jobs WHERE id = $1',
    [id],
  );
  return rows[0]!;
}

export async function countByStatus(
  pool: pg.Pool,
  queue?: string,
): Promise<Record<string, number>> {
  const { rows } = await pool.query<{ status: string; n: number }>(
    'SELECT status, count(*)::int AS n FROM skiplock.jobs WHERE $1::text IS NULL OR queue = $1 GROUP BY status',
    [queue ?? null],
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

/**
 * A table `side` of notes a job's own transaction writes, and a reader of them (sorted): what
 * of a handler's writes committed.
 */
export async function sideNotes(pool: pg.Pool) {
  await pool.query('CREATE TABLE side (note text NOT NULL)');
  return {
    notes: async (): Promise<string[]> => {
      const { rows } = await pool.query<{ note: string }>('SELECT note FROM side ORDER BY note');
      return rows.map((r) => r.note);
    },
    clear: () => pool.query('TRUNCATE side'),
  };
}
