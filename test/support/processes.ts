import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll } from 'vitest';

export interface LogLine extends Record<string, unknown> {
  reason?: string;
}

export interface ChildHandle {
  readonly name: string;
  readonly pid: number;
  readonly child: ChildProcess;
  /** Parsed JSON lines of its stdout, in order (non-JSON lines are kept as `{ text }`). */
  readonly lines: LogLine[];
  /** The last lines of its stderr, for failure messages. */
  stderrTail(): string;
  /** Resolves with how it ended; never rejects. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly hasExited: boolean;
  /** Resolves with the first log line (already seen or yet to come) that `match` accepts. */
  waitForLine(match: (line: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
  kill(signal: NodeJS.Signals): void;
}

const MAX_STDERR_CHARS = 8_000;
const MAX_LINES = 50_000;
const live = new Set<ChildHandle>();

// A test that fails half-way must not leave worker processes behind.
afterAll(async () => {
  const left = [...live];
  for (const handle of left) handle.kill('SIGKILL');
  await Promise.all(left.map((h) => h.exited));
});

/**
 * Runs a JavaScript file (see `bundleForNode`) with plain `node`, as a child process of its own.
 * No wrapper (such as the tsx CLI) sits between: a SIGKILL hits the script's process itself.
 */
export function spawnNode(
  name: string,
  script: string | URL,
  env: Record<string, string | undefined>,
): ChildHandle {
  const path = script instanceof URL ? fileURLToPath(script) : script;
  const child = spawn(process.execPath, [path], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  if (child.pid === undefined) throw new Error(`could not start ${name} (${path})`);
  const lines: LogLine[] = [];
  const waiters = new Set<{ match: (l: LogLine) => boolean; resolve: (l: LogLine) => void }>();
  let stderr = '';
  let done = false;
  createInterface({ input: child.stdout! }).on('line', (text) => {
    let line: LogLine;
    try {
      line = JSON.parse(text) as LogLine;
    } catch {
      line = { text };
    }
    if (lines.length < MAX_LINES) lines.push(line);
    for (const w of waiters) {
      if (w.match(line)) {
        waiters.delete(w);
        w.resolve(line);
      }
    }
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-MAX_STDERR_CHARS);
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => {
      done = true;
      live.delete(handle);
      resolve({ code, signal });
    }),
  );
  const handle: ChildHandle = {
    name,
    pid: child.pid,
    child,
    lines,
    exited,
    get hasExited() {
      return done;
    },
    stderrTail: () => stderr,
    waitForLine(match, timeoutMs = 30_000) {
      const seen = lines.find(match);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const waiter = {
          match,
          resolve: (l: LogLine) => {
            clearTimeout(timer);
            resolve(l);
          },
        };
        const timer = setTimeout(() => {
          waiters.delete(waiter);
          reject(
            new Error(`${name}: no matching log line within ${timeoutMs} ms; stderr: ${stderr}`),
          );
        }, timeoutMs);
        waiters.add(waiter);
        void exited.then(({ code, signal }) => {
          if (!waiters.delete(waiter)) return;
          clearTimeout(timer);
          reject(new Error(`${name} exited (${code ?? signal}) first; stderr: ${stderr}`));
        });
      });
    },
    kill(signal) {
      if (!done) child.kill(signal);
    },
  };
  live.add(handle);
  return handle;
}
