import { execFileSync } from 'node:child_process';
import { chmod, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { waitFor } from '../../../test/support/wait.js';
import { startDemo, type RunningDemo } from './run-demo.js';

const adminUrl = inject('adminUrl');
const temps: string[] = [];
const started: RunningDemo[] = [];

afterAll(async () => {
  // A test that failed half-way must not leave a demo, its workers or its server behind.
  for (const demo of started) demo.signalGroup('SIGKILL');
  await Promise.all(temps.map((dir) => rm(dir, { recursive: true, force: true })));
});

/**
 * A temp dir of the demo's own (TMPDIR), so what it leaves there is told from what other tests
 * leave in the shared one; open to all, as the embedded server's user must reach its data dir.
 */
async function demoTemp(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'skiplock-demo-tmp-'));
  await chmod(dir, 0o755);
  temps.push(dir);
  return dir;
}

/** What the demo may leave in its temp dir: only tsx's compile cache, none of its own files. */
async function leftIn(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((name) => !name.startsWith('tsx-'));
}

interface Member {
  pid: number;
  ppid: number;
  args: string;
}

function processGroup(pgid: number): Member[] {
  const out = execFileSync('ps', ['-eo', 'pid=,ppid=,pgid=,stat=,args='], { encoding: 'utf8' });
  return (
    out
      .split('\n')
      .map((line) => /^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(.*)$/.exec(line))
      .filter((m): m is RegExpExecArray => m !== null)
      // A zombie has exited; it only waits for its parent to read its status.
      .filter((m) => Number(m[3]) === pgid && !m[4]!.startsWith('Z'))
      .map((m) => ({ pid: Number(m[1]), ppid: Number(m[2]), args: m[5]! }))
  );
}

const isWorker = (m: Member) => m.args.includes('worker/main.ts');
const isPostgres = (m: Member) => /native\/bin\/postgres\b/.test(m.args);

async function databaseExists(name: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rows } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    return rows.length > 0;
  } finally {
    await client.end();
  }
}

describe('pnpm demo, interrupted', () => {
  it(
    'on Ctrl-C stops its workers and its PostgreSQL, deletes their files and exits 130',
    { timeout: 60_000 },
    async () => {
      const temp = await demoTemp();
      // Without DATABASE_URL: a throwaway embedded PostgreSQL, with its data dir under `temp`.
      const demo = startDemo(['--count', '300'], { DATABASE_URL: undefined, TMPDIR: temp });
      started.push(demo);
      await demo.waitForOutput(/^progress: /m);
      const running = processGroup(demo.pgid);
      expect(running.filter(isWorker)).toHaveLength(3);
      expect(running.filter(isPostgres).length).toBeGreaterThan(0);
      const files = await leftIn(temp);
      expect(files.filter((f) => f.startsWith('skiplock-pg-'))).toHaveLength(1);
      expect(files.filter((f) => /^skiplock_demo_\w+\.log$/.test(f))).toHaveLength(1);

      // A terminal's Ctrl-C: every process of the group gets SIGINT, PostgreSQL included.
      demo.signalGroup('SIGINT');
      const run = await demo.ended;
      expect(run.status, run.stdout + run.stderr).toBe(130);
      expect(run.stdout).toContain('Interrupted; stopping the workers and cleaning up');
      expect(run.stderr).not.toMatch(/Error|\n\s+at /);
      const survivors = processGroup(demo.pgid).filter((m) => isWorker(m) || isPostgres(m));
      expect(survivors).toEqual([]);
      expect(await leftIn(temp)).toEqual([]);
      // Helpers (esbuild services) follow their parents out within moments.
      await waitFor(() => processGroup(demo.pgid).length === 0, { timeoutMs: 5_000 });
    },
  );

  it(
    "on SIGTERM to the demo's own process stops its workers, drops its database and exits 143",
    { timeout: 60_000 },
    async () => {
      const temp = await demoTemp();
      const demo = startDemo(['--count', '300'], { DATABASE_URL: adminUrl, TMPDIR: temp });
      started.push(demo);
      await demo.waitForOutput(/^progress: /m);
      const name = /fresh database (skiplock_demo_[0-9a-f]+)/.exec(demo.stdout())![1]!;
      const workers = processGroup(demo.pgid).filter(isWorker);
      expect(workers).toHaveLength(3);

      // As a supervisor would stop it: only the demo gets the signal, not its workers.
      const demoPid = workers[0]!.ppid;
      process.kill(demoPid, 'SIGTERM');
      const run = await demo.ended;
      expect(run.status, run.stdout + run.stderr).toBe(143);
      expect(processGroup(demo.pgid).filter(isWorker)).toEqual([]);
      expect(await databaseExists(name)).toBe(false);
      expect(await leftIn(temp)).toEqual([]);
    },
  );

  it(
    'when its output pipe closes (`pnpm demo | head`) stops its workers, drops its database and exits',
    { timeout: 60_000 },
    async () => {
      const temp = await demoTemp();
      const demo = startDemo(['--count', '300'], { DATABASE_URL: adminUrl, TMPDIR: temp });
      started.push(demo);
      await demo.waitForOutput(/fresh database skiplock_demo_[0-9a-f]+\n/);
      const name = /fresh database (skiplock_demo_[0-9a-f]+)/.exec(demo.stdout())![1]!;

      // As `head` does once it has its lines: the demo's next write fails with EPIPE.
      demo.child.stdout!.destroy();
      const run = await demo.ended;
      expect(run.stderr).not.toMatch(/EPIPE|Error|\n\s+at /);
      // Ended on its own, not by a signal. The demo exits 141 (a shell's status for SIGPIPE), but
      // pnpm, its own output gone too, exits 0 whatever its script's status.
      expect(run.code, run.stderr).not.toBeNull();
      expect(processGroup(demo.pgid).filter(isWorker)).toEqual([]);
      expect(await databaseExists(name)).toBe(false);
      expect(await leftIn(temp)).toEqual([]);
    },
  );
});
