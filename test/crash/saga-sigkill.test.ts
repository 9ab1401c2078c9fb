import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { createSagaRuntime } from '../../packages/saga/src/index.js';
import { bundleForNode } from '../support/bundle.js';
import { useTestDatabase } from '../support/db.js';
import { readEffects } from './saga-effects.js';
import { runUnderKills } from './saga-killer.js';
import { CRASH_SCHEMA_SQL, createTransferSaga } from './saga-transfer.js';

const SAGAS = 500;
const WORKERS = 3;
/** The driver stops killing after this many, so a run that cannot finish fails instead of looping. */
const MAX_KILLS = 15;

describe('saga worker processes killed with SIGKILL', () => {
  it('end every saga completed or compensated, with no effect twice and no step skipped', async () => {
    const db = await useTestDatabase();
    await db.pool.query(CRASH_SCHEMA_SQL);
    // Only worker processes die here, never PostgreSQL, so commits need not wait for the disk:
    // without this the run is bound by fsync (several commits per step) rather than by the kills.
    const dbName = new URL(db.url).pathname.slice(1);
    await db.pool.query(`ALTER DATABASE "${dbName}" SET synchronous_commit = off`);
    const script = await bundleForNode(new URL('./saga-worker-process.ts', import.meta.url));

    const saga = createTransferSaga(db.pool);
    const runtime = createSagaRuntime({
      pool: db.pool,
      sagas: [saga],
      logger: pino({ level: 'silent' }),
    });
    const decline = (n: number) => n % 5 === 0;
    const starting = (async () => {
      for (let n = 0; n < SAGAS; n += 50) {
        await Promise.all(
          Array.from({ length: 50 }, (_, i) =>
            runtime.start(saga, { id: `t-${n + i}`, input: { n: n + i, decline: decline(n + i) } }),
          ),
        );
      }
    })();
    // Reported by the first poll below (and the await after), not as an unhandled rejection.
    starting.catch(() => {});

    const kills = await runUnderKills({
      script,
      url: db.url,
      workers: WORKERS,
      maxKills: MAX_KILLS,
      what: `all ${SAGAS} sagas ended`,
      done: async () => {
        await Promise.race([starting, Promise.resolve()]);
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM skiplock.sagas WHERE status IN ('completed', 'compensated')`,
        );
        return rows[0]!.n === SAGAS;
      },
    });
    await starting;
    expect(kills).toBeGreaterThan(0);

    // Each saga ended the way its input says.
    const ended = await db.pool.query<{ id: string; status: string; input: { decline: boolean } }>(
      'SELECT id, status, input FROM skiplock.sagas',
    );
    const wrong = ended.rows.filter(
      (s) => s.status !== (s.input.decline ? 'compensated' : 'completed'),
    );
    expect(wrong).toEqual([]);

    // No step skipped: the history of each saga is exactly its expected timeline.
    const histories = await db.pool.query<{ saga_id: string; timeline: string }>(
      `SELECT saga_id, string_agg(kind || ':' || step || ':' || status, ' ' ORDER BY id) AS timeline
       FROM skiplock.saga_steps GROUP BY saga_id`,
    );
    const expectedTimeline = (declined: boolean) =>
      declined
        ? 'step:reserve:completed step:debit:completed step:credit:failed ' +
          'compensation:debit:completed compensation:reserve:completed'
        : 'step:reserve:completed step:debit:completed step:credit:completed step:notify:completed';
    const badHistory = histories.rows.filter(
      (h) => h.timeline !== expectedTimeline(decline(Number(h.saga_id.slice(2)))),
    );
    expect(badHistory).toEqual([]);
    expect(histories.rows).toHaveLength(SAGAS);

    // No effect twice: one transactional effect row per key, one external row per key.
    const effects = await readEffects(db.pool, 'saga_crash');
    expect(effects.repeated).toEqual([]);
    const declined = Array.from({ length: SAGAS }, (_, n) => n).filter(decline).length;
    // debit + credit + notify per completed saga; debit + its compensation per declined one.
    expect(effects.keys).toBe((SAGAS - declined) * 3 + declined * 2);
    expect(effects.external.keys).toBe(SAGAS + declined);

    // Every saga job ended; none was enqueued twice (the keys are unique per queue anyway).
    const jobs = await db.pool.query<{ status: string; n: number }>(
      `SELECT status::text, count(*)::int AS n FROM skiplock.jobs GROUP BY status`,
    );
    // Per saga: four completed jobs (four steps, or two steps and two compensations), plus the
    // declined credit's dead job.
    expect(jobs.rows.sort((a, b) => a.status.localeCompare(b.status))).toEqual([
      { status: 'completed', n: SAGAS * 4 },
      { status: 'dead', n: declined },
    ]);

    // Kills landed on handed-off steps: a step job inserted leased to the worker that finished
    // the step before it, whose first attempt then died with that worker (its lease expired).
    const handedOffKilled = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n
       FROM skiplock.saga_steps s
       JOIN skiplock.saga_steps p ON p.saga_id = s.saga_id
        AND p.id = (SELECT max(id) FROM skiplock.saga_steps WHERE saga_id = s.saga_id AND id < s.id)
       JOIN skiplock.jobs sj ON sj.id = s.job_id
       JOIN skiplock.jobs pj ON pj.id = p.job_id
       WHERE sj.errors -> 0 ->> 'reason' = 'lease_expired'
         AND (sj.errors -> 0 ->> 'attempt')::int = 1
         AND sj.errors -> 0 ->> 'message' = 'lease expired: worker ' || pj.locked_by || ' stopped heartbeating'
         AND abs(extract(epoch FROM sj.created_at - pj.updated_at)) < 5`,
    );
    expect(handedOffKilled.rows[0]!.n).toBeGreaterThan(0);

    // What the kills cost: steps whose code ran more than once (absorbed by the keys above).
    const reruns = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM (SELECT 1 FROM saga_crash.runs
        GROUP BY saga_id, step, kind HAVING count(*) > 1) r`,
    );
    console.log(
      `[saga crash] ${SAGAS} sagas, ${kills} SIGKILLs, ${reruns.rows[0]!.n} steps re-run, ` +
        `${effects.external.calls - effects.external.keys} duplicate external calls absorbed, ` +
        `${handedOffKilled.rows[0]!.n} handed-off steps killed and finished elsewhere`,
    );
    await runtime.close();
  });
});
