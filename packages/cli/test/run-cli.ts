import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll } from 'vitest';

/**
 * The CLI's entry point from source, through tsx, with the workspace packages' sources (the
 * `skiplock-source` condition, inherited from vitest.config.ts). The compiled `bin/skiplock.js`
 * is run from an installed tarball by the consumer test (test/consumer).
 */
const MAIN = fileURLToPath(new URL('../src/main.ts', import.meta.url));
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
/**
 * tsx's ES module hooks only: what the compiled CLI has once it registers them for a TypeScript
 * module (`typescript-loader.ts`), where `tsx` registers the CommonJS hooks too and so hid that
 * a `.ts` module of a CommonJS project could not load.
 */
export const TSX_ESM_ONLY = pathToFileURL(createRequire(import.meta.url).resolve('tsx/esm')).href;

export function fixture(name: string): string {
  return fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

type Env = Record<string, string | undefined>;

// A bound on output kept per process, so a runaway child cannot exhaust the test's memory.
const MAX_OUTPUT_CHARS = 1_000_000;
const MAX_LINES = 20_000;

const live = new Set<ChildProcess>();
// A test that fails half-way must not leave CLI processes behind.
afterAll(async () => {
  for (const child of live) child.kill('SIGKILL');
});

function start(args: string[], env: Env, cwd?: string, loader = TSX_LOADER): ChildProcess {
  const child = spawn(process.execPath, ['--import', loader, MAIN, ...args], {
    env: { ...process.env, SKIPLOCK_DEBUG: undefined, ...env },
    cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  child.once('exit', () => live.delete(child));
  return child;
}

/** Runs one CLI command to its end; the child is killed after `timeoutMs`. */
export function runCli(
  args: string[],
  env: Env,
  { timeoutMs = 60_000, cwd }: { timeoutMs?: number; cwd?: string } = {},
): Promise<CliResult> {
  const child = start(args, env, cwd);
  let stdout = '';
  let stderr = '';
  child.stdout!.on(
    'data',
    (c: Buffer) => (stdout = (stdout + c.toString()).slice(-MAX_OUTPUT_CHARS)),
  );
  child.stderr!.on(
    'data',
    (c: Buffer) => (stderr = (stderr + c.toString()).slice(-MAX_OUTPUT_CHARS)),
  );
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  return new Promise((resolve) =>
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
}

export type LogLine = Record<string, unknown>;

export interface LongRunning {
  child: ChildProcess;
  /** stdout's JSON log lines so far. */
  lines: LogLine[];
  /** The same lines as written, unparsed. */
  rawLines: string[];
  stderr(): string;
  waitForLine(match: (line: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Starts a long-running command (the worker) whose JSON log lines a test can wait on. */
export function startCli(
  args: string[],
  env: Env,
  { loader }: { loader?: string } = {},
): LongRunning {
  const child = start(args, env, undefined, loader);
  const lines: LogLine[] = [];
  const rawLines: string[] = [];
  const waiters = new Set<{ match: (l: LogLine) => boolean; resolve: (l: LogLine) => void }>();
  let stderr = '';
  child.stderr!.on(
    'data',
    (c: Buffer) => (stderr = (stderr + c.toString()).slice(-MAX_OUTPUT_CHARS)),
  );
  createInterface({ input: child.stdout! }).on('line', (text) => {
    let line: LogLine;
    try {
      line = JSON.parse(text) as LogLine;
    } catch {
      line = { text };
    }
    if (lines.length < MAX_LINES) {
      lines.push(line);
      rawLines.push(text);
    }
    for (const w of waiters) {
      if (w.match(line)) {
        waiters.delete(w);
        w.resolve(line);
      }
    }
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('close', (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    lines,
    rawLines,
    stderr: () => stderr,
    exited,
    waitForLine(match, timeoutMs = 60_000) {
      const seen = lines.find(match);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const waiter = { match, resolve };
        const timer = setTimeout(() => {
          waiters.delete(waiter);
          reject(
            new Error(`no matching log line in ${timeoutMs} ms; stderr: ${stderr.slice(-2000)}`),
          );
        }, timeoutMs);
        waiter.resolve = (line) => {
          clearTimeout(timer);
          resolve(line);
        };
        waiters.add(waiter);
        void exited.then(() => {
          if (!waiters.has(waiter)) return;
          waiters.delete(waiter);
          clearTimeout(timer);
          reject(new Error(`process exited before the log line; stderr: ${stderr.slice(-2000)}`));
        });
      });
    },
  };
}

/** A TCP port with nothing listening on it: bound once by us, then closed. */
export async function closedPort(): Promise<number> {
  const { createServer } = await import('node:net');
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * Runs the CLI in this process, with the same arguments, environment and exit code as the
 * binary. Each spawned CLI costs about a second of CPU (tsx loading the libraries), so tables
 * of argument checks run here, and each command's real process behaviour is tested by `runCli`.
 */
export async function runInProcess(args: string[], env: Env): Promise<CliResult> {
  const { runCli: run } = await import('../src/cli.js');
  let stdout = '';
  let stderr = '';
  const code = await run(args, {
    stdout: (text) => (stdout += text),
    stderr: (text) => (stderr += text),
    env: withoutUnset({ ...process.env, SKIPLOCK_DEBUG: undefined, ...env }),
    cwd: process.cwd(),
  });
  return { code, stdout, stderr };
}

function withoutUnset(env: Env): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(env)) if (value !== undefined) out[key] = value;
  return out;
}
