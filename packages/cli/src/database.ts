import pg from 'pg';
import { CliError } from './args.js';
import { databaseError, describeTarget } from './db-errors.js';

export interface Database {
  pool: pg.Pool;
  /** The database's clock when the command started; ages are shown against it, not ours. */
  now: Date;
  close(): Promise<void>;
}

export interface OpenOptions {
  maxConnections?: number;
  applicationName?: string;
  /** Fail with a hint to run `skiplock migrate` when the skiplock schema is missing (default). */
  requireSchema?: boolean;
  onPoolError?: (error: Error) => void;
}

// Long enough for a busy server, short enough that a firewalled host does not hang a command.
const CONNECT_TIMEOUT_MS = 10_000;

/** Opens a pool and proves it works with one round trip, so failures surface before any work. */
export async function openDatabase(url: string, options: OpenOptions = {}): Promise<Database> {
  const pool = new pg.Pool({
    connectionString: url,
    max: options.maxConnections ?? 2,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    application_name: options.applicationName ?? 'skiplock-cli',
  });
  // An idle connection dropped by the server must not crash the process.
  pool.on('error', (error) => options.onPoolError?.(error));
  const close = () => pool.end().catch(() => {});
  let row: { now: Date; has_schema: boolean };
  try {
    const result = await pool.query<{ now: Date; has_schema: boolean }>(
      "SELECT now() AS now, to_regclass('skiplock.jobs') IS NOT NULL AS has_schema",
    );
    row = result.rows[0]!;
  } catch (error) {
    await close();
    throw databaseError(error, url);
  }
  if (options.requireSchema !== false && !row.has_schema) {
    await close();
    const { address, database } = describeTarget(url);
    throw new CliError(
      `the skiplock schema is missing in database "${database}" at ${address}; ` +
        'run `skiplock migrate` first',
    );
  }
  return { pool, now: new Date(row.now), close };
}

/** Runs `work` on an open database and closes it; connection failures get a clear message. */
export async function withDatabase<T>(
  url: string,
  work: (db: Database) => Promise<T>,
  options: OpenOptions = {},
): Promise<T> {
  const db = await openDatabase(url, options);
  try {
    return await work(db);
  } catch (error) {
    throw databaseError(error, url);
  } finally {
    await db.close();
  }
}
