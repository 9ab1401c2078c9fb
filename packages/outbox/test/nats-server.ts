import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';

/** Where the `nats-server` binary is: on PATH, or in the sbin directories Debian installs it to. */
export function findNatsServer(): string | null {
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/local/sbin'];
  for (const dir of dirs) {
    if (dir && existsSync(join(dir, 'nats-server'))) return join(dir, 'nats-server');
  }
  return null;
}

/**
 * A nats-server of the test's own, with JetStream on a temporary store, that the test may stop
 * and start again: same port, same store, so streams and their messages survive the restart.
 */
export interface PrivateNatsServer {
  readonly url: string;
  /** SIGTERM (a clean shutdown, JetStream flushed), resolving once the process has exited. */
  stop(): Promise<void>;
  /** Starts it again, resolving once it logs "Server is ready" (JetStream restored). */
  start(): Promise<void>;
  /** Kills it if running and removes the store. */
  dispose(): Promise<void>;
}

/** A TCP port nothing listens on just now. */
export async function freePort(): Promise<number> {
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

export async function startNatsServer(binary: string): Promise<PrivateNatsServer> {
  const storeDir = await mkdtemp(join(tmpdir(), 'skiplock-nats-'));
  const port = await freePort();
  let child: ChildProcess | null = null;
  let exited: Promise<void> = Promise.resolve();

  const start = async () => {
    const args = ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', storeDir];
    const proc = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    child = proc;
    exited = new Promise((resolve) => proc.once('exit', () => resolve()));
    let output = '';
    await new Promise<void>((resolve, reject) => {
      let settled = false;
      const settle = (error?: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (!error) return resolve();
        proc.kill('SIGKILL');
        reject(new Error(`nats-server on port ${port}: ${error.message}; output: ${output}`));
      };
      const timer = setTimeout(() => settle(new Error('not ready within 20 s')), 20_000);
      // Read stderr to its end, whatever happens: a full pipe would block the server.
      proc.stderr!.on('data', (chunk: Buffer) => {
        output = (output + chunk.toString()).slice(-8_000);
        if (output.includes('Server is ready')) settle();
      });
      proc.once('exit', (code, signal) => settle(new Error(`exited (${code ?? signal})`)));
    });
  };

  const stop = async () => {
    child?.kill('SIGTERM');
    await exited;
    child = null;
  };

  try {
    await start();
  } catch (error) {
    await rm(storeDir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: `nats://127.0.0.1:${port}`,
    start,
    stop,
    async dispose() {
      child?.kill('SIGKILL');
      await exited;
      child = null;
      await rm(storeDir, { recursive: true, force: true });
    },
  };
}
