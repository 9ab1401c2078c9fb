import { createClient } from '@skiplock/queue';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { bundleForNode } from '../support/bundle.js';
import { useTestDatabase } from '../support/db.js';
import { spawnNode } from '../support/processes.js';
import { waitFor } from '../support/wait.js';
import { ratedJob } from './keyed-job.js';

const KEYS = 2;
const PER_KEY = 150;
const LIMIT = 50;
const WORKERS = 3;

/** The most starts within any window [t, t + ms) of sorted start times. */
function busiestWindow(starts: number[], ms: number): number {
  let most = 0;
  let from = 0;
  for (let to = 0; to < starts.length; to++) {
    while (starts[to]! - starts[from]! >= ms) from++;
    most = Math.max(most, to - from + 1);
  }
  return most;
}

describe('rate limits across worker processes', () => {
  it('50 starts per second per key: never more in any 1 s window, and jobs wait without an attempt', async () => {
    const db = await useTestDatabase();
    const client = createClient({ pool: db.pool, logger: pino({ level: 'silent' }) });
    await client.enqueueMany(
      ratedJob(),
      Array.from({ length: KEYS * PER_KEY }, (_, n) => ({ payload: { tenant: n % KEYS, n } })),
    );
    const script = await bundleForNode(new URL('./keyed-worker-process.ts', import.meta.url));
    const workers = Array.from({ length: WORKERS }, (_, i) =>
      spawnNode(`rated-${i}`, script, { DATABASE_URL: db.url, KEYED_JOB: 'rated' }),
    );
    // While the first second's starts run, the rest wait, none with an attempt spent.
    await waitFor(
      async () =>
        (
          await db.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM skiplock.jobs WHERE status = 'completed'`,
          )
        ).rows[0]!.n >= LIMIT,
      { what: 'the first starts', timeoutMs: 60_000 },
    );
    const waiting = await db.pool.query<{ attempts: number; n: number }>(
      `SELECT attempts, count(*)::int AS n FROM skiplock.jobs WHERE status = 'waiting'
       GROUP BY attempts`,
    );
    expect(waiting.rows.map((r) => r.attempts)).toEqual([0]);
    await waitFor(
      async () =>
        (
          await db.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM skiplock.jobs WHERE status = 'completed'`,
          )
        ).rows[0]!.n ===
        KEYS * PER_KEY,
      { what: 'every job completed', timeoutMs: 60_000 },
    );
    for (const w of workers) w.kill('SIGTERM');
    await Promise.all(workers.map((w) => w.exited));

    // Each job ran once, so its lock time is its one start, in the database clock.
    const { rows } = await db.pool.query<{ key: string; attempts: number; at: string }>(
      `SELECT concurrency_key AS key, attempts,
              (extract(epoch FROM locked_at) * 1000)::float8::text AS at
       FROM skiplock.jobs ORDER BY locked_at`,
    );
    expect(new Set(rows.map((r) => r.attempts))).toEqual(new Set([1]));
    for (let k = 0; k < KEYS; k++) {
      const starts = rows.filter((r) => r.key === `tenant:${k}`).map((r) => Number(r.at));
      expect(starts).toHaveLength(PER_KEY);
      const most = busiestWindow(starts, 1_000);
      console.log(`[rate] tenant:${k}: at most ${most} starts in any 1 s window`);
      expect(most).toBeLessThanOrEqual(LIMIT);
      // The limit was reached (the test could fail), and 150 starts took at least two windows.
      expect(most).toBe(LIMIT);
      expect(starts.at(-1)! - starts[0]!).toBeGreaterThanOrEqual(2_000);
    }
  });
});
