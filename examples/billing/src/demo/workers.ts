import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { WorkerConfig } from '../worker/config.js';

const packageDir = fileURLToPath(new URL('../..', import.meta.url));
const workerScript = fileURLToPath(new URL('../worker/main.ts', import.meta.url));

export interface WorkerFleet {
  /** Live worker processes. */
  readonly size: number;
  /** Starts `count` workers and resolves when each reports it is claiming. */
  start(count: number): Promise<void>;
  /**
   * SIGKILLs one worker (`pid` when it is ours, else any): no shutdown, no release, so its jobs
   * come back only when their leases expire. Then starts a replacement.
   */
  killOneAndReplace(pid?: number): Promise<{ killedPid: number; replacementPid: number }>;
  /** Workers that exited without being asked to. */
  readonly unexpectedExits: { pid: number; code: number | null; signal: string | null }[];
  /** SIGTERM to all (graceful drain), SIGKILL after `timeoutMs`. */
  stop(timeoutMs?: number): Promise<void>;
}

interface Member {
  child: ChildProcess;
  exited: Promise<void>;
  expectedExit: boolean;
}

/**
 * Real worker processes, each a `node --import tsx` child running `src/worker/main.ts`, so that
 * claims compete across processes exactly as in production. Their logs go to `logFd`.
 */
export function createFleet(options: {
  databaseUrl: string;
  config: WorkerConfig;
  logFd: number;
  /** Named in errors, so a worker that dies at start-up can be looked into. */
  logPath: string;
  readyTimeoutMs?: number;
}): WorkerFleet {
  const members = new Set<Member>();
  const unexpectedExits: WorkerFleet['unexpectedExits'] = [];
  const readyTimeoutMs = options.readyTimeoutMs ?? 60_000;

  function spawnOne(): Promise<Member> {
    const child = spawn(process.execPath, ['--import', 'tsx', workerScript], {
      cwd: packageDir,
      env: {
        ...process.env,
        DATABASE_URL: options.databaseUrl,
        BILLING_WORKER_CONFIG: JSON.stringify(options.config),
      },
      stdio: ['ignore', options.logFd, options.logFd, 'ipc'],
    });
    const member: Member = {
      child,
      expectedExit: false,
      exited: new Promise((resolve) => child.once('exit', () => resolve())),
    };
    members.add(member);
    child.once('exit', (code, signal) => {
      members.delete(member);
      if (!member.expectedExit) unexpectedExits.push({ pid: child.pid ?? -1, code, signal });
    });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(
          new Error(
            `worker ${child.pid} did not report ready within ${readyTimeoutMs} ms (its log: ${options.logPath})`,
          ),
        );
      }, readyTimeoutMs);
      child.on('message', (message) => {
        if ((message as { type?: string }).type === 'ready') {
          clearTimeout(timer);
          resolve(member);
        }
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(
          new Error(
            `worker exited before it was ready (code ${code}, signal ${signal}); its log: ${options.logPath}`,
          ),
        );
      });
    });
  }

  return {
    get size() {
      return members.size;
    },
    unexpectedExits,
    async start(count) {
      await Promise.all(Array.from({ length: count }, () => spawnOne()));
    },
    async killOneAndReplace(pid) {
      const victim = [...members].find((m) => m.child.pid === pid) ?? [...members][0];
      if (!victim) throw new Error('no worker left to kill');
      victim.expectedExit = true;
      victim.child.kill('SIGKILL');
      await victim.exited;
      const replacement = await spawnOne();
      return { killedPid: victim.child.pid ?? -1, replacementPid: replacement.child.pid ?? -1 };
    },
    async stop(timeoutMs = 15_000) {
      const all = [...members];
      for (const m of all) {
        m.expectedExit = true;
        m.child.kill('SIGTERM');
      }
      const timer = setTimeout(() => all.forEach((m) => m.child.kill('SIGKILL')), timeoutMs);
      await Promise.all(all.map((m) => m.exited));
      clearTimeout(timer);
    },
  };
}
