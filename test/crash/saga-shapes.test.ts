import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { createSagaRuntime } from '../../packages/saga/src/index.js';
import { bundleForNode } from '../support/bundle.js';
import { useTestDatabase } from '../support/db.js';
import { readEffects } from './saga-effects.js';
import { runUnderKills } from './saga-killer.js';
import { createTreeSagas, TREE_SCHEMA_SQL, treeWorkload } from './saga-tree.js';

const SAGAS = 500;

describe('sagas with parallel branches and a child saga, their workers killed with SIGKILL', () => {
  it('end completed or compensated with their branches and children, each effect once and no step skipped', async () => {
    const db = await useTestDatabase();
    await db.pool.query(TREE_SCHEMA_SQL);
    // Only workers die here, never PostgreSQL (see saga-sigkill.test.ts).
    const dbName = new URL(db.url).pathname.slice(1);
    await db.pool.query(`ALTER DATABASE "${dbName}" SET synchronous_commit = off`);
    const script = await bundleForNode(new URL('./saga-worker-process.ts', import.meta.url));
    const { order } = createTreeSagas(db.pool);
    const runtime = createSagaRuntime({
      pool: db.pool,
      sagas: [order],
      logger: pino({ level: 'silent' }),
    });
    const workload = treeWorkload(SAGAS);
    const { refuse, decline, rows: expectedRows } = workload;
    const starting = workload.start(runtime, order, 50);
    starting.catch(() => {});
    const kills = await runUnderKills({
      script,
      url: db.url,
      env: { SAGA_SET: 'tree' },
      workers: 3,
      maxKills: 40,
      what: `all ${SAGAS} sagas, their branches and children ended`,
      timeoutMs: 240_000,
      done: async () => {
        await Promise.race([starting, Promise.resolve()]);
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM skiplock.sagas WHERE status IN ('completed', 'compensated')`,
        );
        return rows[0]!.n === expectedRows;
      },
    });
    await starting;
    await runtime.close();
    expect(kills).toBeGreaterThan(0);

    // Each parent, branch and child ended as the input says; each history is exactly its timeline.
    const { rows } = await db.pool.query<{ id: string; status: string; timeline: string }>(
      `SELECT s.id, s.status,
              string_agg(st.kind || ':' || st.step || ':' || st.status, ' ' ORDER BY st.id) AS timeline
       FROM skiplock.sagas s JOIN skiplock.saga_steps st ON st.saga_id = s.id
       GROUP BY s.id`,
    );
    expect(rows).toHaveLength(expectedRows);
    const undone = (steps: string[]) =>
      `compensated ${steps.map((s) => `step:${s}:completed`).join(' ')} ` +
      [...steps]
        .reverse()
        .map((s) => `compensation:${s}:completed`)
        .join(' ');
    const expected = (id: string) => {
      const [, n, , branch, child] = /^o-(\d+)(\/prepare\/(\w+)|(\/ship))?$/.exec(id)!;
      const refused = refuse(Number(n));
      const declined = decline(Number(n));
      if (branch === 'audit') return 'completed step:audit:completed';
      if (branch === 'card' && refused) return 'compensated step:card:failed';
      if (branch)
        return refused || declined ? undone([branch]) : `completed step:${branch}:completed`;
      if (child) {
        return declined
          ? undone(['pack', 'label'])
          : 'completed step:pack:completed step:label:completed';
      }
      if (refused) {
        return (
          'compensated step:reserve:completed step:prepare:failed ' +
          'compensation:prepare:completed compensation:reserve:completed'
        );
      }
      return declined
        ? 'compensated step:reserve:completed step:prepare:completed step:ship:completed ' +
            'step:charge:failed compensation:ship:completed compensation:prepare:completed ' +
            'compensation:reserve:completed'
        : 'completed step:reserve:completed step:prepare:completed step:ship:completed ' +
            'step:charge:completed step:notify:completed';
    };
    const wrong = rows.filter((r) => `${r.status} ${r.timeline}` !== expected(r.id));
    expect(wrong).toEqual([]);

    // No effect twice: one row per idempotency key, and the count each outcome implies.
    const effects = await readEffects(db.pool, 'saga_tree');
    expect(effects.repeated).toEqual([]);
    expect(effects.keys).toBe(workload.effects);
    // reserve per order, and its release per compensated one.
    expect(effects.external.keys).toBe(SAGAS + workload.declined + workload.refused);
    console.log(
      `[saga shapes crash] ${SAGAS} sagas with 3 branches and a child each, ${kills} SIGKILLs, ` +
        `${effects.external.calls - effects.external.keys} duplicate external calls absorbed`,
    );
  }, 300_000);
});
