import { readDatabaseClock } from '@skiplock/queue';
import type pg from 'pg';
import type { Logger } from 'pino';

/** How long the first request waits for the first read; later ones never wait. */
const FIRST_READ_WAIT_MS = 1_000;
/** How soon a read that failed is tried again. */
const RETRY_MS = 5_000;

/**
 * The database's clock, which the pages judge leases and show ages by: the host's clock plus its
 * offset from the server's. Leases, `run_at` and every time shown were stamped by the server; by
 * the host's clock, a host behind the server showed a job whose lease had run out as still
 * running, and offered no retry for it. The offset is read once a `refreshMs` (one `SELECT` a
 * minute by default, not one a page), in the background: only the first request waits for it,
 * for at most a second, so the sign-in page and the assets still answer while the database is
 * down (the host's clock stands in until a read succeeds; a failed read is tried again after
 * 5 s, logged at debug as `dashboard_clock_unread`).
 */
export function createDatabaseClock(
  pool: pg.Pool,
  logger: Logger,
  refreshMs = 60_000,
): () => Promise<number> {
  let offsetMs: number | null = null;
  let nextReadAt = 0;
  let reading: Promise<void> | null = null;
  const read = () =>
    (reading ??= (async () => {
      try {
        const sent = Date.now();
        const server = (await readDatabaseClock(pool)).getTime();
        // The server read its clock somewhere in the round trip: take its middle.
        offsetMs = server - (sent + Date.now()) / 2;
        nextReadAt = performance.now() + refreshMs;
      } catch (error) {
        nextReadAt = performance.now() + RETRY_MS;
        logger.debug(
          { reason: 'dashboard_clock_unread', err: (error as Error)?.message ?? String(error) },
          "could not read the database's clock; the host's stands in",
        );
      } finally {
        reading = null;
      }
    })());
  let waited = false;
  return async () => {
    if (performance.now() >= nextReadAt) void read();
    if (!waited && reading !== null) {
      // The first requests (those before the first read ends) wait for it, a second at most.
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        reading,
        new Promise<void>((resolve) => (timer = setTimeout(resolve, FIRST_READ_WAIT_MS))),
      ]);
      clearTimeout(timer);
    }
    waited = true;
    return Date.now() + (offsetMs ?? 0);
  };
}
