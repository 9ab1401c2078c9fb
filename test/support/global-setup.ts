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

/**
 * Starts (or finds) one PostgreSQL for the whole run and builds one migrated template database;
 * every test file then clones its own database from it in milliseconds.
 */
export default async function setup(project: TestProject) {
  const db = await startDatabase();
  // Runs killed before their teardown left databases behind; two hours is far past any run.
  await dropStaleRunDatabases(db.url, 2 * 3_600_000);
  const stamp = runStamp();
  const runPrefix = runDatabasePrefix(stamp);
  const template = `${runPrefix}template`;
  await createDatabase(db.url, template);
  await migrate({
    connectionString: withDatabaseName(db.url, template),
    include: [outboxMigrations],
    logger: pino({ level: 'silent' }),
  });
  project.provide('adminUrl', db.url);
  project.provide('templateDatabase', template);
  project.provide('runPrefix', runPrefix);
  project.provide('databaseSource', db.source);
  console.log(`[skiplock tests] PostgreSQL from ${db.source}`);
  return async () => {
    // Clones of tests whose files failed or timed out before their own afterAll included.
    await dropRunDatabases(db.url, stamp).catch(() => {});
    await db.stop();
  };
}
