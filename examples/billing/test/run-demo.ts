import { spawn, type ChildProcess } from 'node:child_process';
import { constants } from 'node:os';
import { fileURLToPath } from 'node:url';

const repoRoot = fileURLToPath(new URL('../../..', import.meta.url));

export interface DemoRun {
  code: number | null;
  /** The exit status a shell reports: the code, or 128 + the signal that ended pnpm. */
  status: number | null;
  stdout: string;
  stderr: string;
}

export interface RunningDemo {
  child: ChildProcess;
  /** The demo's process group: pnpm, tsx, the demo, its workers and an embedded PostgreSQL. */
  pgid: number;
  stdout(): string;
  /** Resolves once stdout matches `pattern`; rejects if the demo ends first or `timeoutMs` passes. */
  waitForOutput(pattern: RegExp, timeoutMs?: number): Promise<void>;
  /** Sends `signal` to the whole process group, as a terminal's Ctrl-C does. */
  signalGroup(signal: NodeJS.Signals): void;
  ended: Promise<DemoRun>;
}

/**
 * Starts `pnpm demo <args>` from the repository root, exactly as the READMEs show it, in a
 * process group of its own. An env value of `undefined` unsets that variable.
 */
export function startDemo(args: string[], env: NodeJS.ProcessEnv = {}): RunningDemo {
  const child = spawn('pnpm', ['demo', ...args], {
    cwd: repoRoot,
    env: { ...process.env, NO_COLOR: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let stdout = '';
  let stderr = '';
  const listeners = new Set<() => void>();
  child.stdout!.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    for (const listener of listeners) listener();
  });
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const ended = new Promise<DemoRun>((resolve, reject) => {
    child.once('error', reject);
    // pnpm re-raises a SIGINT on itself once its script has ended, as a shell expects of Ctrl-C.
    child.once('close', (code, signal) =>
      resolve({
        code,
        status: code ?? (signal ? 128 + constants.signals[signal] : null),
        stdout,
        stderr,
      }),
    );
  });
  const signalGroup = (signal: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, signal);
    } catch {
      // Already gone.
    }
  };
  return {
    child,
    pgid: child.pid!,
    stdout: () => stdout,
    signalGroup,
    ended,
    waitForOutput(pattern, timeoutMs = 60_000) {
      return new Promise((resolve, reject) => {
        const done = (error?: Error) => {
          listeners.delete(check);
          clearTimeout(timer);
          if (error) reject(error);
          else resolve();
        };
        const check = () => {
          if (pattern.test(stdout)) done();
        };
        const timer = setTimeout(
          () => done(new Error(`no ${pattern} in ${timeoutMs} ms; stdout: ${stdout.slice(-2000)}`)),
          timeoutMs,
        );
        listeners.add(check);
        void ended.then(() =>
          done(new Error(`demo ended before ${pattern}; stderr: ${stderr.slice(-2000)}`)),
        );
        check();
      });
    },
  };
}

/**
 * Runs `pnpm demo <args>` to its end. Past `timeoutMs` the whole process group gets SIGINT (the
 * demo then stops its workers and drops its database), and SIGKILL if it is still there 10 s
 * later, so a hung run never outlives its test.
 */
export async function runDemo(
  args: string[],
  env: NodeJS.ProcessEnv = {},
  timeoutMs = 100_000,
): Promise<DemoRun> {
  const demo = startDemo(args, env);
  const interrupt = setTimeout(() => demo.signalGroup('SIGINT'), timeoutMs);
  const kill = setTimeout(() => demo.signalGroup('SIGKILL'), timeoutMs + 10_000);
  try {
    return await demo.ended;
  } finally {
    clearTimeout(interrupt);
    clearTimeout(kill);
  }
}
