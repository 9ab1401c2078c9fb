import { runSql, type Queryable } from './db.js';
import { databaseNow } from './sql/schedules.js';

/**
 * The database server's clock (`clock_timestamp()`): the clock every lease, `run_at` and
 * timestamp of the jobs table is written by, for `isLeaseExpired` and `isStoppedRunLive` and for
 * ages. A host's own clock can be off by seconds or more, and a lease is judged to the second.
 */
export async function readDatabaseClock(db: Queryable): Promise<Date> {
  return (await runSql<{ now: Date }>(db, databaseNow())).rows[0]!.now;
}
