import { startEmbeddedPostgres, type EmbeddedServer } from '@skiplock/devdb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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

const JOBS = 3_000;
const WORKERS = 3;

/**
 * The worker's `asyncCommit` (default on) lets claims, batched completions, renewals and releases
 * commit without waiting for their WAL write. This crashes the server the way
 * `pg_ctl stop -m immediate` does in the middle of a drain, with the option on and off, and checks
 * the stated cost: completions of the last moments may be forgotten and those jobs run again;
 * no job is lost and no `completeWith` write is lost or doubled.
 */
describe('PostgreSQL crashed (immediate stop) in the middle of a drain', () => {
  // This test crashes the server, so it runs one of its own whatever DATABASE_URL says, with the
  // server's default synchronous_commit = on, as in production.
  let server: EmbeddedServer;
  beforeAll(async () => {
    [server] = await Promise.all([
      startEmbeddedPostgres({ durableCommits: true }),
      prepareWorkerScript(),
    ]);
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
  });

  it.each([true, false])(
    'asyncCommit %s: every job completes, none is lost, completeWith effects once, re-runs counted',
    async (asyncCommit) => {
      const { pool, url } = await prepareCrashDrain(
        server.url,
        `crash_immediate_${asyncCommit}`,
        JOBS,
      );
      try {
        const fleet = await startWorkerFleet(url, `immediate-${asyncCommit}-`, WORKERS, {
          ...FAULT_TEST_WORKERS,
          asyncCommit,
        });
        const completed = () => completedCount(pool, fleet);
        await waitFor(async () => ((await completed()) ?? 0) >= JOBS / 3, {
          timeoutMs: 90_000,
          intervalMs: 50,
          what: 'a third of the jobs completed',
        });
        // What the database showed as completed just before the crash. A commit is visible only
        // after its WAL is written when it waits for it, so with asyncCommit off every one of
        // these must survive; with it on, the newest may be forgotten.
        const { rows: before } = await pool.query<{ id: string; attempts: number }>(
          `SELECT id::text, attempts FROM skiplock.jobs WHERE status = 'completed'`,
        );
        await server.crash();
        expect(before.length).toBeLessThan(JOBS);
        await server.startServer();
        await waitFor(async () => (await completed()) === JOBS, {
          timeoutMs: 120_000,
          intervalMs: 200,
          what: `all ${JOBS} jobs completed after the crash`,
        });
        const codes = await Promise.all(fleet.workers.map(stopWorkerProcess));
        expect(fleet.unexpectedExits).toEqual([]);
        expect(codes).toEqual(fleet.workers.map(() => 0));

        const outcome = await readOutcome(pool);
        expect(outcome.byStatus).toEqual({ completed: JOBS });
        // Every completed job was completed by a run of its final attempt on the worker that
        // holds it, and one claim never ran twice.
        expect(outcome.completedWithoutFinalRun).toBe(0);
        expect(outcome.attemptsRunTwice).toBe(0);
        // completeWith always waits for its WAL: its effect is never lost nor doubled.
        expect(outcome.wrongEffects).toBe(0);
        const { rows: after } = await pool.query<{ id: string; attempts: number }>(
          `SELECT id::text, attempts FROM skiplock.jobs WHERE id = ANY($1::bigint[])`,
          [before.map((r) => r.id)],
        );
        const attemptsBefore = new Map(before.map((r) => [r.id, r.attempts]));
        const forgotten = after.filter((r) => r.attempts !== attemptsBefore.get(r.id)).length;
        if (!asyncCommit) expect(forgotten).toBe(0);
        console.log(
          `[immediate stop, asyncCommit ${asyncCommit}] ${before.length} of ${JOBS} completed ` +
            `before the crash; ${forgotten} completions forgotten and run again; ` +
            `${outcome.jobsRunMoreThanOnce} jobs run more than once in all`,
        );
      } finally {
        await pool.end();
      }
    },
    240_000,
  );
});
