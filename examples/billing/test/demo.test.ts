import { chmod, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { invariants } from '../src/invariants.js';
import { runDemo } from './run-demo.js';

const adminUrl = inject('adminUrl');

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

describe('pnpm demo', () => {
  it(
    'runs 40 sagas on worker processes and prints a summary whose invariants all pass',
    { timeout: 120_000 },
    async () => {
      // A temp dir of its own, to see that the run leaves nothing there (tsx keeps its cache).
      const temp = await mkdtemp(join(tmpdir(), 'skiplock-demo-tmp-'));
      await chmod(temp, 0o755);
      const run = await runDemo(['--count', '40', '--decline-rate', '0.3'], {
        DATABASE_URL: adminUrl,
        TMPDIR: temp,
      }).finally(async () => {
        const left = (await readdir(temp)).filter((name) => !name.startsWith('tsx-'));
        await rm(temp, { recursive: true, force: true });
        expect(left, 'files the demo left in its temp dir').toEqual([]);
      });
      expect(run.stderr).not.toMatch(/failed|Error/);
      expect(run.code, run.stdout).toBe(0);
      expect(run.stdout).toMatch(/40 of 40 finished: \d+ completed · \d+ compensated · 0 failed/);
      expect(run.stdout).toMatch(/Why +\d+ (card declined|declined late|no confirmation)/);
      expect(run.stdout).toMatch(/Retries +\d+ step retries/);
      expect(run.stdout).toMatch(/Throughput +[\d.]+ sagas\/s/);
      expect(run.stdout).toMatch(/Latency +p50 [\d.]+ m?s · p95 [\d.]+ m?s/);
      for (const invariant of invariants) {
        expect(run.stdout).toContain(`PASS  ${invariant.name}`);
      }
      expect(run.stdout).toMatch(/Timeline of compensated saga inv_\w+/);
      expect(run.stdout).toMatch(/undo reserve-credit +completed/);
      expect(run.stdout).toMatch(/saga compensated/);
      expect(run.stdout).toContain('PASS  every saga completed or compensated');
      expect(run.stdout).toMatch(/Events +\d+ relayed to (NATS JetStream|a local webhook)/);
      expect(run.stdout).toMatch(/PASS {2}each of \d+ paid invoices produced exactly one/);
      // Not a TTY: periodic progress lines instead of a redrawn bar.
      expect(run.stdout).toMatch(/^progress: 40\/40 \(100%\)/m);
      // The demo's database is dropped at the end.
      const name = /fresh database (skiplock_demo_[0-9a-f]+)/.exec(run.stdout)?.[1];
      expect(name).toBeDefined();
      expect(await databaseExists(name!)).toBe(false);
      // A passing run deletes the workers' log, so the summary does not point at it.
      expect(run.stdout).not.toContain('logs in');
    },
  );
});
