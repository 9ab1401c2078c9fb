import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ChildMessage, ChildReport, ChildTask, ParentMessage } from './protocol.js';

const CHILD = fileURLToPath(new URL('./child.ts', import.meta.url));

export interface ChildHandle {
  handled: number;
  ready: Promise<void>;
  send(message: ParentMessage): void;
  report(): Promise<ChildReport>;
  /** Asks the child to stop and waits for it to exit (killed after `graceMs`). */
  stop(graceMs?: number): Promise<void>;
}

/**
 * With `BENCH_CPU_PROF=<dir>`, every child writes a V8 CPU profile there when it exits (Node's
 * `--cpu-prof`, which `NODE_OPTIONS` refuses): what `bench/README.md`'s profiles are made from.
 */
const profileArgs = (): string[] => {
  const dir = process.env['BENCH_CPU_PROF'];
  return dir ? ['--cpu-prof', `--cpu-prof-dir=${dir}`] : [];
};

/** Starts a benchmark child process for one task: its own TypeScript through tsx, skiplock built. */
export function spawnChild(task: ChildTask): ChildHandle {
  const child: ChildProcess = fork(CHILD, [], {
    execArgv: [...profileArgs(), '--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let failure: Error | null = null;
  let onReady: () => void = () => {};
  let onFailure: (error: Error) => void = () => {};
  let reportWaiter: ((report: ChildReport) => void) | null = null;
  let lastReport: ChildReport | null = null;
  // Workers and relays run until asked; other children report when their work is done.
  const onRequest = task.role === 'worker' || task.role === 'relay';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const ready = new Promise<void>((resolve, reject) => {
    onReady = resolve;
    onFailure = reject;
  });
  const handle: ChildHandle = {
    handled: 0,
    ready,
    send: (message) => {
      if (child.connected) child.send(message);
    },
    report: () =>
      new Promise<ChildReport>((resolve, reject) => {
        if (failure) return reject(failure);
        if (lastReport && !onRequest) return resolve(lastReport);
        reportWaiter = resolve;
        onFailure = reject;
        if (onRequest) handle.send({ type: 'report' });
      }),
    stop: async (graceMs = 8_000) => {
      handle.send({ type: 'stop' });
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
  child.on('message', (message: ChildMessage) => {
    if (message.type === 'ready') onReady();
    else if (message.type === 'progress') handle.handled = message.handled;
    else if (message.type === 'report') {
      handle.handled = message.report.handled;
      lastReport = message.report;
      reportWaiter?.(message.report);
    } else if (message.type === 'failed') {
      failure = new Error(`${task.system} ${task.role} process failed: ${message.error}`);
      onFailure(failure);
    }
  });
  child.once('exit', (code) => {
    if (code !== 0 && !failure) {
      failure = new Error(`${task.system} ${task.role} process exited with code ${code}`);
      onFailure(failure);
    }
  });
  child.send(task);
  return handle;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
