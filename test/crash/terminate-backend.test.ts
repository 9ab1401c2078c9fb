import { setTimeout as delay } from 'node:timers/promises';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../support/db.js';
import { waitFor } from '../support/wait.js';
import {
  countByStatus,
  createCrashTables,
  enqueueCrashJobs,
  readOutcome,
  FAULT_TEST_WORKERS,
  startWorkerFleet,
  stopWorkerProcess,
} from './harness.js';

const JOBS = 2_000;
const WORKERS = 4;
/** Terminations stop once this share of the jobs is done; the rest shows the workers carry on. */
const STORM_UNTIL = 0.7;
/** Jobs per wave after the storm: one per slot of the whole fleet (4 workers x 8). */
const WAVE = 32;

const KINDS = ['claim', 'complete', 'in_transaction', 'listener', 'any'] as const;
type Kind = (typeof KINDS)[number];

/**
 * Statements this quick are rarely caught running. Slowing the claim and the completion down (a
 * few ms per row, in a trigger of this test's own database) makes "mid-claim" and
 * "mid-completion" terminations happen every run instead of once in a while.
 */
async function slowDownClaimsAndCompletions(pool: pg.Pool) {
  await pool.query(`
    CREATE FUNCTION crash.slow_down() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_sleep(0.002); RETURN NEW; END $$;
    CREATE TRIGGER slow_down BEFORE UPDATE ON skiplock.jobs FOR EACH ROW
      WHEN (NEW.status IS DISTINCT FROM OLD.status AND NEW.status IN ('processing', 'completed'))
      EXECUTE FUNCTION crash.slow_down();`);
}

/** Terminates one backend of the workers of the given kind; says whether it found one. */
async function terminateOne(client: pg.Client, kind: Kind): Promise<boolean> {
  const { rows } = await client.query<{ hit: boolean }>(
    `SELECT pg_terminate_backend(pid) AS hit FROM (
       SELECT pid, CASE
         -- Claims run on the listener's connection while it is up, and on the pool's meanwhile.
         WHEN state = 'active' AND query LIKE '%SKIP LOCKED%' THEN 'claim'
         WHEN application_name = 'skiplock-listener' THEN 'listener'
         WHEN state = 'active' AND query LIKE '%''completed''%' THEN 'complete'
         WHEN state = 'idle in transaction' THEN 'in_transaction'
         ELSE 'other' END AS kind
       FROM pg_stat_activity
       WHERE datname = current_database()
         AND application_name IN ('skiplock-worker', 'skiplock-listener')) a
     WHERE $1 = 'any' OR kind = $1
     ORDER BY random() LIMIT 1`,
    [kind],
  );
  return rows[0]?.hit === true;
}

describe('pg_terminate_backend on worker connections', () => {
  it('mid-claim and mid-completion neither crashes a worker process nor loses a job', async () => {
    const db = await useTestDatabase();
    await createCrashTables(db.pool);
    await slowDownClaimsAndCompletions(db.pool);
    // Every other job completes through completeWith, whose transaction the terminator also hits.
    await enqueueCrashJobs(db.pool, JOBS, (n) => (n % 2 === 0 ? 'tx' : 'plain'));
    const startedAt = Date.now();

    const fleet = await startWorkerFleet(db.url, 'term-w', WORKERS, FAULT_TEST_WORKERS);
    const { workers, unexpectedExits } = fleet;

    const terminator = new pg.Client({
      connectionString: db.url,
      application_name: 'crash-terminator',
    });
    await terminator.connect();
    const hits: Record<Kind, number> = {
      claim: 0,
      complete: 0,
      in_transaction: 0,
      listener: 0,
      any: 0,
    };
    let storming = true;
    const storm = (async () => {
      // Bounded: at most this many rounds, whatever happens.
      for (let round = 0; storming && round < 5_000; round++) {
        const kind = KINDS[round % KINDS.length]!;
        if (await terminateOne(terminator, kind)) hits[kind] += 1;
        await delay(20 + Math.random() * 60);
      }
    })();

    const failFast = () => {
      fleet.assertAlive();
    };
    let lastStormExecution = 0;
    try {
      await waitFor(
        async () => {
          failFast();
          return ((await countByStatus(db.pool)).completed ?? 0) >= JOBS * STORM_UNTIL;
        },
        { timeoutMs: 150_000, intervalMs: 200, what: 'the first part of the jobs completed' },
      );
    } finally {
      storming = false;
      await storm;
      lastStormExecution = Number(
        (await db.pool.query<{ id: string }>('SELECT max(id)::text AS id FROM crash.executions'))
          .rows[0]!.id,
      );
      await terminator.end();
    }
    await waitFor(
      async () => {
        failFast();
        return (await countByStatus(db.pool)).completed === JOBS;
      },
      { timeoutMs: 90_000, intervalMs: 200, what: `all ${JOBS} jobs completed` },
    );

    // Every worker process kept claiming and running jobs after the storm. The jobs left when it
    // ended may all go to the other workers (each claims several at a time, and one just hit may
    // still be in its claim back-off, up to a few seconds), so waves of new jobs follow, each
    // announced by NOTIFY, until every worker has run one of them. A wedged worker never does.
    let total = JOBS;
    const workersAfterStorm = async () =>
      (
        await db.pool.query<{ worker_id: string }>(
          'SELECT DISTINCT worker_id FROM crash.executions WHERE id > $1',
          [lastStormExecution],
        )
      ).rows
        .map((r) => r.worker_id)
        .sort();
    const everyWorker = workers.map((w) => w.name).sort();
    for (let wave = 0; wave < 20; wave++) {
      if ((await workersAfterStorm()).length === WORKERS) break;
      await enqueueCrashJobs(db.pool, WAVE, (n) => (n % 2 === 0 ? 'tx' : 'plain'));
      total += WAVE;
      await waitFor(
        async () => {
          failFast();
          return (await countByStatus(db.pool)).completed === total;
        },
        { timeoutMs: 30_000, intervalMs: 100, what: `wave ${wave + 1} completed` },
      );
      await delay(500);
    }
    expect(await workersAfterStorm()).toEqual(everyWorker);

    const codes = await Promise.all(workers.map(stopWorkerProcess));
    expect(unexpectedExits).toEqual([]);
    expect(codes).toEqual(workers.map(() => 0));

    // The faults did land where this test says they did.
    expect(hits.claim).toBeGreaterThan(0);
    expect(hits.complete).toBeGreaterThan(0);
    expect(hits.in_transaction).toBeGreaterThan(0);
    expect(hits.listener).toBeGreaterThan(0);
    const faultLines = workers.flatMap((w) =>
      w.lines.filter((l) => l.reason === 'db_error' || l.reason === 'listen_reconnect'),
    );
    expect(faultLines.length).toBeGreaterThan(0);

    const outcome = await readOutcome(db.pool);
    expect(outcome.byStatus).toEqual({ completed: total });
    expect(outcome.attemptsRunTwice).toBe(0);
    expect(outcome.completedWithoutFinalRun).toBe(0);
    // A job ran again only after an attempt the database recorded as failed or expired.
    expect(outcome.earlier.filter((e) => e.reasons.length === 0)).toEqual([]);

    // completeWith's effect committed exactly once per job, with the completing attempt.
    expect(outcome.wrongEffects).toBe(0);

    console.log(
      `[terminate] ${Math.round((Date.now() - startedAt) / 1000)} s: ${JOBS} jobs, ` +
        `terminated ${JSON.stringify(hits)}; ${total - JOBS} jobs after it; ` +
        `${outcome.executions} executions, ` +
        `${outcome.jobsRunMoreThanOnce} jobs run again`,
    );
  }, 240_000);
});
