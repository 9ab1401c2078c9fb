import { readDatabaseClock } from '@skiplock/queue';
import type pg from 'pg';

/**
 * The database's clock, which the pages judge leases and show ages by: the host's clock plus its
 * offset from the server's, read at most once a `refreshMs` (one `SELECT` a minute by default,
 * not one a page). Leases, `run_at` and every time shown were stamped by the server; by the
 * host's clock, a host behind the server showed a job whose lease had run out as still running,
 * and offered no retry for it. While the offset cannot be read (the database is down, and the
 * page fails on its own reads anyway), the last one is kept and it is read again next time.
 */
export function createDatabaseClock(pool: pg.Pool, refreshMs = 60_000): () => Promise<number> {
  let offsetMs = 0;
  let readAt = Number.NEGATIVE_INFINITY;
  let reading: Promise<void> | null = null;
  const read = async () => {
    const sent = Date.now();
    const server = (await readDatabaseClock(pool)).getTime();
    // The server read its clock somewhere in the round trip: take its middle.
    offsetMs = server - (sent + Date.now()) / 2;
    readAt = performance.now();
  };
  return async () => {
    if (performance.now() - readAt >= refreshMs) {
      reading ??= read()
        .catch(() => {})
        .finally(() => (reading = null));
      await reading;
    }
    return Date.now() + offsetMs;
  };
}
