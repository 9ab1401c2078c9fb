import pg from 'pg';
import type { Logger } from './logger.js';

// int8 (ids, counts) arrives as text so no id is silently rounded by a JS number.

export interface PoolSource {
  pool?: pg.Pool;
  connectionString?: string;
  /** Size of a pool skiplock creates itself. */
  maxConnections?: number;
}

export interface OwnedPool {
  pool: pg.Pool;
  /** Ends the pool only when skiplock created it. */
  release(): Promise<void>;
}

/**
 * Uses the caller's pool, or creates one from a connection string. A created pool handles `error`
 * events (an idle connection dropped by a database restart) so that they are logged instead of
 * crashing the process; the pool replaces the connection on next use.
 */
export function resolvePool(source: PoolSource, logger: Logger, role: string): OwnedPool {
  if (source.pool) {
    return { pool: source.pool, release: async () => {} };
  }
  const connectionString = source.connectionString ?? process.env.DATABASE_URL;
  if (!connectionString) {
    throw new TypeError(`${role}: pass a pg pool or a connectionString (or set DATABASE_URL)`);
  }
  const pool = new pg.Pool({
    connectionString,
    max: source.maxConnections ?? 10,
    application_name: `skiplock-${role}`,
  });
  pool.on('error', (error) => {
    logger.warn({ reason: 'db_error', role, err: error.message }, 'idle connection error');
  });
  let ended = false;
  return {
    pool,
    release: async () => {
      if (ended) return;
      ended = true;
      await pool.end();
    },
  };
}
