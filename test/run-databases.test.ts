import { createDatabase, listDatabases } from '@skiplock/devdb';
import { describe, expect, inject, it } from 'vitest';
import { useTestDatabase } from './support/db.js';
import {
  dropRunDatabases,
  dropStaleRunDatabases,
  RUN_PREFIX,
  runDatabasePrefix,
  runStamp,
} from './support/run-databases.js';

const db = await useTestDatabase();

describe('databases a test run makes', () => {
  it("carry the run's prefix, so its teardown finds every one", async () => {
    const prefix = inject('runPrefix');
    expect(prefix.startsWith(RUN_PREFIX)).toBe(true);
    expect(new URL(db.url).pathname.slice(1).startsWith(prefix)).toBe(true);
    expect(inject('templateDatabase')).toBe(`${prefix}template`);
  });

  it("a run's teardown drops its own, and the next run drops a killed run's once they are stale", async () => {
    const admin = inject('adminUrl');
    const hour = 3_600_000;
    const killed = runStamp(Date.now() - 3 * hour); // a run killed three hours ago
    const recent = runStamp(Date.now() - 10 * 60_000); // another run, still going
    for (const stamp of [killed, recent]) {
      await createDatabase(admin, `${runDatabasePrefix(stamp)}template`);
      await createDatabase(admin, `${runDatabasePrefix(stamp)}clone`);
    }

    const stale = await dropStaleRunDatabases(admin, 2 * hour);
    expect(stale.sort()).toEqual(
      [`${runDatabasePrefix(killed)}clone`, `${runDatabasePrefix(killed)}template`].sort(),
    );
    expect(await listDatabases(admin, runDatabasePrefix(killed))).toEqual([]);
    // Younger than the cutoff: left alone, as is this run's own.
    expect(await listDatabases(admin, runDatabasePrefix(recent))).toHaveLength(2);
    expect(await listDatabases(admin, inject('runPrefix'))).toContain(
      new URL(db.url).pathname.slice(1),
    );

    expect((await dropRunDatabases(admin, recent)).sort()).toEqual(
      [`${runDatabasePrefix(recent)}clone`, `${runDatabasePrefix(recent)}template`].sort(),
    );
    expect(await listDatabases(admin, runDatabasePrefix(recent))).toEqual([]);
  });
});
