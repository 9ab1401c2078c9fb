import type { TestProject } from 'vitest/node';
import { outboxMigrations } from '@skiplock/outbox';
import { migrate } from '@skiplock/saga';
import { createDatabase, startDatabase, withDatabaseName } from '@skiplock/devdb';
import pino from 'pino';
import {
  dropRunDatabases,
  dropStaleRunDatabases,
  runDatabasePrefix,
  runStamp,
} from './run-databases.js';

declare module 'vitest' {
  export interface ProvidedContext {
    adminUrl: string;
    templateDatabase: string;
    /** Every database this run makes starts with it; the run drops them all at its end. */
    runPrefix: string;
    databaseSource: string;
  }
}

interface RunDatabase {
  adminUrl: string;
  template: string;
  runPrefix: string;
  source: string;
  teardown(): Promise<void>;
}

/**
 * The run's server and template, shared by every project of the run (vitest calls the global
 * setup for the root and for each project, one after another, in one process): the first call
 * starts them, the last teardown stops them.
 */
const SHARED = Symbol.for('skiplock.tests.runDatabase');
type Shared = { ready: Promise<RunDatabase>; users: number };
const registry = globalThis as { [SHARED]?: Shared };

async function startRunDatabase(): Promise<RunDatabase> {
  const db = await startDatabase();
  const stamp = runStamp();
  const runPrefix = runDatabasePrefix(stamp);
  const template = `${runPrefix}template`;
  try {
    // Runs killed before their teardown left databases behind; two hours is far past any run.
    await dropStaleRunDatabases(db.url, 2 * 3_600_000);
    await createDatabase(db.url, template);
    await migrate({
      connectionString: withDatabaseName(db.url, template),
      include: [outboxMigrations],
      logger: pino({ level: 'silent' }),
    });
  } catch (error) {
    // The run will not start: leave no template and no embedded server behind.
    await dropRunDatabases(db.url, stamp).catch(() => {});
    await db.stop().catch(() => {});
    throw error;
  }
  console.log(`[skiplock tests] PostgreSQL from ${db.source}`);
  return {
    adminUrl: db.url,
    template,
    runPrefix,
    source: db.source,
    teardown: async () => {
      // Clones of tests whose files failed or timed out before their own afterAll included.
      await dropRunDatabases(db.url, stamp).catch(() => {});
      await db.stop();
    },
  };
}

/**
 * Starts (or finds) one PostgreSQL for the whole run and builds one migrated template database;
 * every test file then clones its own database from it in milliseconds.
 */
export default async function setup(project: TestProject) {
  const shared = (registry[SHARED] ??= { ready: startRunDatabase(), users: 0 });
  shared.users += 1;
  let run: RunDatabase;
  try {
    run = await shared.ready;
  } catch (error) {
    // Not cached: a later run in this process (watch mode) starts afresh.
    if (registry[SHARED] === shared) delete registry[SHARED];
    throw error;
  }
  project.provide('adminUrl', run.adminUrl);
  project.provide('templateDatabase', run.template);
  project.provide('runPrefix', run.runPrefix);
  project.provide('databaseSource', run.source);
  return async () => {
    shared.users -= 1;
    if (shared.users > 0) return;
    delete registry[SHARED];
    await run.teardown();
  };
}
