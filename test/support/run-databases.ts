import { randomBytes } from 'node:crypto';
import { dropDatabase, listDatabases } from '@skiplock/devdb';

/**
 * Every database a test run makes on the server is named `skiplock_run_<time>_<rand>_…`, where
 * time is the run's start in seconds (base 36). The run drops its own at teardown, also when
 * tests failed; a run that was killed before its teardown leaves them behind, so each run also
 * drops runs' databases older than `staleAfterMs` (not younger: another run may be going on
 * against the same server).
 */
export const RUN_PREFIX = 'skiplock_run_';

function timeStamp(now: number): string {
  return Math.floor(now / 1000)
    .toString(36)
    .padStart(7, '0');
}

/** The run's start time, then random hex, so two runs started in one second stay apart. */
export function runStamp(now = Date.now()): string {
  return `${timeStamp(now)}_${randomBytes(2).toString('hex')}`;
}

export function runDatabasePrefix(stamp: string): string {
  return `${RUN_PREFIX}${stamp}_`;
}

/** Drops the databases of this run (its prefix). Returns their names. */
export async function dropRunDatabases(adminUrl: string, stamp: string): Promise<string[]> {
  const names = await listDatabases(adminUrl, runDatabasePrefix(stamp));
  for (const name of names) await dropDatabase(adminUrl, name);
  return names;
}

/** Drops the databases of earlier runs that started more than `staleAfterMs` ago. */
export async function dropStaleRunDatabases(
  adminUrl: string,
  staleAfterMs: number,
  now = Date.now(),
): Promise<string[]> {
  const cutoff = timeStamp(now - staleAfterMs);
  const stale = (await listDatabases(adminUrl, RUN_PREFIX)).filter((name) => {
    const stamp = name.slice(RUN_PREFIX.length).split('_')[0] ?? '';
    return /^[0-9a-z]{7}$/.test(stamp) && stamp < cutoff;
  });
  for (const name of stale) await dropDatabase(adminUrl, name);
  return stale;
}
