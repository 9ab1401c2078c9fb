import pg from 'pg';
import type { Logger } from './logger.js';

// int8 (ids, counts) arrives as text so no id is silently rounded by a JS number.

export interface PoolSource {
  pool?: pg.Pool | undefined;
  connectionString?: string | undefined;
  /** Size of a pool skiplock creates itself. */
  maxConnections?: number | undefined;
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
    guardClients(source.pool);
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
    // A network that silently drops packets would otherwise hang a query until the OS gives up
    // (minutes); keepalive probes and a connect deadline turn it into an error the loops back off from.
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    connectionTimeoutMillis: 10_000,
  });
  pool.on('error', (error) => {
    logger.warn({ reason: 'db_error', role, err: error.message }, 'idle connection error');
  });
  guardClients(pool);
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

const guardedPools = new WeakSet<pg.Pool>();
const guardedClients = new WeakSet<pg.PoolClient>();
const ignoreError = () => {};

/**
 * pg-pool listens for errors only on idle clients. A client it hands to a waiting `connect()`
 * has no listener until the caller's code runs, a microtask later; when a reply and the server's
 * FATAL "terminating connection" arrive in one packet, the error is emitted in that gap, unhandled,
 * and the process dies. So every client gets a listener of its own for life. It stays silent: the
 * failed query, or the pool's `error` event for an idle client, already reports the fault, and a
 * client that errored is not queryable, so the pool drops it on release.
 */
function guardClients(pool: pg.Pool): void {
  if (guardedPools.has(pool)) return;
  guardedPools.add(pool);
  pool.on('acquire', (client) => {
    if (guardedClients.has(client)) return;
    guardedClients.add(client);
    client.on('error', ignoreError);
  });
}
