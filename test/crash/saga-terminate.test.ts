import { setTimeout as delay } from 'node:timers/promises';
import pg from 'pg';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { createSagaRuntime } from '../../packages/saga/src/index.js';
import { bundleForNode } from '../support/bundle.js';
import { useTestDatabase } from '../support/db.js';
import { readEffects } from './saga-effects.js';
import { runUnderKills } from './saga-killer.js';
import { createTreeSagas, TREE_SCHEMA_SQL, treeWorkload } from './saga-tree.js';

const SAGAS = 200;

describe('saga workers whose connections are terminated (pg_terminate_backend) in a loop', () => {
  it('end every saga completed or compensated, each effect once, none stuck', async () => {
    const db = await useTestDatabase();
    await db.pool.query(TREE_SCHEMA_SQL);
    const script = await bundleForNode(new URL('./saga-worker-process.ts', import.meta.url));
    const { order } = createTreeSagas(db.pool);
    const runtime = createSagaRuntime({
      pool: db.pool,
      sagas: [order],
      logger: pino({ level: 'silent' }),
    });
    const workload = treeWorkload(SAGAS);
    const expectedRows = workload.rows;
    const starting = workload.start(runtime, order, 25);
    starting.catch(() => {});
    const killer = new pg.Client({ connectionString: db.url });
    await killer.connect();
    let terminated = 0;
    let storm = true;
    const terminator = (async () => {
      while (storm) {
        await delay(20 + Math.random() * 40);
        const { rows } = await killer.query<{ hit: boolean }>(
          `SELECT pg_terminate_backend(pid) AS hit FROM pg_stat_activity
           WHERE datname = current_database() AND pid <> pg_backend_pid()
             AND (application_name LIKE 'saga-w%' OR application_name LIKE 'skiplock%')
           ORDER BY random() LIMIT 1`,
        );
        if (rows[0]?.hit) terminated++;
      }
    })();
    const ended = async () =>
      (
        await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM skiplock.sagas WHERE status IN ('completed', 'compensated')`,
        )
      ).rows[0]!.n;
    try {
      await runUnderKills({
        script,
        url: db.url,
        env: { SAGA_SET: 'tree' },
        workers: 3,
        maxKills: 0,
        what: `all ${SAGAS} sagas, their branches and children ended`,
        timeoutMs: 150_000,
        done: async () => {
          const n = await ended();
          if (n >= expectedRows * 0.7) storm = false;
          return n === expectedRows;
        },
      });
    } catch (error) {
      storm = false;
      const stuck = await db.pool.query(
        `SELECT s.id, s.status, s.current_step, s.current_kind, s.current_job_id, s.updated_at,
                j.status AS job_status, j.attempts, j.locked_by, j.lease_expires_at, j.last_error
         FROM skiplock.sagas s LEFT JOIN skiplock.jobs j ON j.id = s.current_job_id
         WHERE s.status NOT IN ('completed', 'compensated') ORDER BY s.id LIMIT 20`,
      );
      console.log('STUCK', JSON.stringify(stuck.rows, null, 1));
      throw error;
    } finally {
      storm = false;
      await terminator;
      await killer.end();
    }
    await starting;
    await runtime.close();
    console.log(`[saga terminate] ${terminated} backends terminated`);
    expect(terminated).toBeGreaterThan(0);
    const statuses = await db.pool.query<{ status: string; n: number }>(
      `SELECT status, count(*)::int AS n FROM skiplock.sagas GROUP BY status`,
    );
    expect(statuses.rows.filter((r) => !['completed', 'compensated'].includes(r.status))).toEqual(
      [],
    );
    const effects = await readEffects(db.pool, 'saga_tree');
    expect(effects.repeated).toEqual([]);
    expect(effects.keys).toBe(workload.effects);
  }, 240_000);
});
