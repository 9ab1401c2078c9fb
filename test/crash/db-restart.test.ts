import { startEmbeddedPostgres, type EmbeddedServer } from '@skiplock/devdb';
import { afterAll, describe, expect, it } from 'vitest';
import { waitFor } from '../support/wait.js';
import {
  completedCount,
  prepareCrashDrain,
  prepareWorkerScript,
  readOutcome,
  FAULT_TEST_WORKERS,
  startWorkerFleet,
  stopWorkerProcess,
} from './harness.js';

const JOBS = 2_000;
const WORKERS = 4;

describe('PostgreSQL restarted under running worker processes', () => {
  // This test restarts the server, so it runs one of its own whatever DATABASE_URL says.
  let server: EmbeddedServer | null = null;
  afterAll(async () => {
    await server?.stop();
  });

  it('loses no job and crashes no worker; they reconnect and finish the work', async () => {
    const [started] = await Promise.all([startEmbeddedPostgres(), prepareWorkerScript()]);
    server = started;
    const { url, pool } = await prepareCrashDrain(server.url, 'crash_restart', JOBS);
    try {
      const startedAt = Date.now();

      const fleet = await startWorkerFleet(url, 'restart-w', WORKERS, FAULT_TEST_WORKERS);
      const { workers, unexpectedExits } = fleet;
      const completed = () => completedCount(pool, fleet);

      await waitFor(async () => ((await completed()) ?? 0) >= JOBS / 3, {
        timeoutMs: 90_000,
        intervalMs: 100,
        what: 'a third of the jobs completed',
      });
      const { rows } = await pool.query<{ id: string }>(
        'SELECT coalesce(max(id), 0)::text AS id FROM crash.executions',
      );
      const beforeRestart = Number(rows[0]!.id);
      await server.restart();
      await waitFor(async () => (await completed()) === JOBS, {
        timeoutMs: 120_000,
        intervalMs: 200,
        what: `all ${JOBS} jobs completed after the restart`,
      });

      const codes = await Promise.all(workers.map(stopWorkerProcess));
      expect(unexpectedExits).toEqual([]);
      expect(codes).toEqual(workers.map(() => 0));

      // Each worker saw the restart, and went on working after it.
      for (const w of workers) {
        expect(
          w.lines.some((l) => l.reason === 'db_error' || l.reason === 'heartbeat_failed'),
        ).toBe(true);
        expect(w.lines.some((l) => l.reason === 'listen_reconnect')).toBe(true);
      }
      const { rows: after } = await pool.query<{ worker_id: string }>(
        'SELECT DISTINCT worker_id FROM crash.executions WHERE id > $1',
        [beforeRestart],
      );
      expect(after.map((r) => r.worker_id).sort()).toEqual(workers.map((w) => w.name).sort());

      const outcome = await readOutcome(pool);
      expect(outcome.byStatus).toEqual({ completed: JOBS });
      expect(outcome.attemptsRunTwice).toBe(0);
      expect(outcome.completedWithoutFinalRun).toBe(0);
      // A job ran again only after an attempt the database recorded as failed or expired.
      expect(outcome.earlier.filter((e) => e.reasons.length === 0)).toEqual([]);
      // completeWith's effect committed exactly once per job, with the completing attempt.
      expect(outcome.wrongEffects).toBe(0);

      console.log(
        `[restart] ${Math.round((Date.now() - startedAt) / 1000)} s: ${JOBS} jobs, ` +
          `${outcome.executions} executions, ${outcome.jobsRunMoreThanOnce} jobs run again`,
      );
    } finally {
      await pool.end();
    }
  }, 240_000);
});
