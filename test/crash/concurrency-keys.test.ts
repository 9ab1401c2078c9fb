import { setTimeout as delay } from 'node:timers/promises';
import { createClient } from '@skiplock/queue';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { bundleForNode } from '../support/bundle.js';
import { useTestDatabase } from '../support/db.js';
import { spawnNode, type ChildHandle } from '../support/processes.js';
import { keyedJob } from './keyed-job.js';

const JOBS = 5_000;
const KEYS = 200;
const WORKERS = 8;
const LIMIT = 2;

interface Sample {
  running: number;
  admitted: number;
  completed: number;
  recovered: number;
}

describe('concurrency keys across worker processes', () => {
  it('8 processes over 5,000 jobs in 200 keys never run more than 2 of a key, through a SIGKILL', async () => {
    const db = await useTestDatabase();
    const client = createClient({ pool: db.pool, logger: pino({ level: 'silent' }) });
    const job = keyedJob();
    for (let from = 0; from < JOBS; from += 1_000) {
      await client.enqueueMany(
        job,
        Array.from({ length: 1_000 }, (_, i) => ({
          payload: { tenant: (from + i) % KEYS, n: from + i },
        })),
      );
    }
    const script = await bundleForNode(new URL('./keyed-worker-process.ts', import.meta.url));
    const workers: ChildHandle[] = Array.from({ length: WORKERS }, (_, i) =>
      spawnNode(`keyed-${i}`, script, { DATABASE_URL: db.url }),
    );
    await Promise.all(workers.map((w) => w.waitForLine((l) => l.reason === 'started', 60_000)));

    // One statement per sample, so its counts are of one instant: the most jobs of any key
    // processing, and the most holding a slot (pending or processing), across all workers.
    const sampler = db.newPool(1);
    const sample = async (): Promise<Sample> =>
      (
        await sampler.query<Sample>(`
          SELECT
            (SELECT coalesce(max(n), 0)::int FROM (
               SELECT count(*) AS n FROM skiplock.jobs WHERE status = 'processing'
               GROUP BY concurrency_key) p) AS running,
            (SELECT coalesce(max(n), 0)::int FROM (
               SELECT count(*) AS n FROM skiplock.jobs
               WHERE status IN ('pending', 'retryable', 'processing') GROUP BY concurrency_key) a)
              AS admitted,
            (SELECT count(*)::int FROM skiplock.jobs WHERE status = 'completed') AS completed,
            (SELECT count(*)::int FROM skiplock.jobs
             WHERE errors @> '[{"reason": "lease_expired"}]') AS recovered`)
      ).rows[0]!;

    let maxRunning = 0;
    let maxAdmitted = 0;
    let samples = 0;
    let samplesBeforeKill = 0;
    let samplesAfterRecovery = 0;
    let killed: ChildHandle | null = null;
    const deadline = Date.now() + 150_000;
    for (;;) {
      const s = await sample();
      samples += 1;
      maxRunning = Math.max(maxRunning, s.running);
      maxAdmitted = Math.max(maxAdmitted, s.admitted);
      if (!killed) samplesBeforeKill += 1;
      if (s.recovered > 0) samplesAfterRecovery += 1;
      if (s.completed === JOBS) break;
      if (!killed && s.completed >= JOBS / 10) {
        // Mid-run: one worker dies holding jobs; their leases expire and other workers' sweepers
        // take them back, while the sampling goes on.
        killed = workers[0]!;
        killed.kill('SIGKILL');
      }
      const exited = workers.find((w) => w !== killed && w.hasExited);
      if (exited) throw new Error(`${exited.name} exited: ${exited.stderrTail()}`);
      if (Date.now() > deadline) throw new Error(`not done in time: ${JSON.stringify(s)}`);
      await delay(5);
    }
    const recovered = (await sample()).recovered;
    console.log(
      `[keys] ${samples} samples (${samplesBeforeKill} before the kill, ` +
        `${samplesAfterRecovery} after leases were taken back, ` +
        `${recovered} jobs): at most ${maxRunning} of a key processing, ${maxAdmitted} admitted`,
    );
    for (const w of workers) if (w !== killed) w.kill('SIGTERM');
    await Promise.all(workers.map((w) => w.exited));

    expect(maxRunning).toBeLessThanOrEqual(LIMIT);
    expect(maxAdmitted).toBeLessThanOrEqual(LIMIT);
    // The bound was reached (the test could have failed), and the samples span the recovery.
    // How many samples fit in the run depends on the machine's load: 376-434 with this file
    // alone, 88 in a CI run with the whole suite alongside (which an earlier floor of 100
    // failed). The floor is there to catch a sampler that stalled, not to time the run.
    expect(maxRunning).toBe(LIMIT);
    expect(samples).toBeGreaterThan(40);
    expect(samplesAfterRecovery).toBeGreaterThan(10);
    const { rows } = await db.pool.query<{ status: string; n: number }>(
      `SELECT status, count(*)::int AS n FROM skiplock.jobs GROUP BY status`,
    );
    expect(rows).toEqual([{ status: 'completed', n: JOBS }]);
  });
});
