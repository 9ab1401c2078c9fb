import type { TestProject } from 'vitest/node';
import { migrate } from '@skiplock/saga';
import { createDatabase, dropDatabase, startDatabase, withDatabaseName } from '@skiplock/devdb';
import { randomBytes } from 'node:crypto';
import pino from 'pino';

declare module 'vitest' {
  export interface ProvidedContext {
    adminUrl: string;
    templateDatabase: string;
    databaseSource: string;
  }
}

/**
 * Starts (or finds) one PostgreSQL for the whole run and builds one migrated template database;
 * every test file then clones its own database from it in milliseconds.
 */
export default async function setup(project: TestProject) {
  const db = await startDatabase();
  const template = `skiplock_template_${randomBytes(4).toString('hex')}`;
  await createDatabase(db.url, template);
  await migrate({
    connectionString: withDatabaseName(db.url, template),
    logger: pino({ level: 'silent' }),
  });
  project.provide('adminUrl', db.url);
  project.provide('templateDatabase', template);
  project.provide('databaseSource', db.source);
  console.log(`[skiplock tests] PostgreSQL from ${db.source}`);
  return async () => {
    await dropDatabase(db.url, template).catch(() => {});
    await db.stop();
  };
}
