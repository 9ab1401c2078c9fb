import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { createSagaRuntime } from '../../packages/saga/src/index.js';
import { bundleForNode } from '../support/bundle.js';
import { useTestDatabase } from '../support/db.js';
import { readEffects } from './saga-effects.js';
import { runUnderKills } from './saga-killer.js';
import { createTreeSagas, TREE_SCHEMA_SQL } from './saga-tree.js';

const SAGAS = 300;

describe('sagas with a child saga, their workers killed with SIGKILL', () => {
  it('end completed or compensated with their children, each effect once and no step skipped', async () => {
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
    const decline = (n: number) => n % 5 === 0;
    const starting = (async () => {
      for (let n = 0; n < SAGAS; n += 50) {
        await Promise.all(
          Array.from({ length: 50 }, (_, i) =>
            runtime.start(order, {
              id: `o-${n + i}`,
              input: { n: n + i, decline: decline(n + i) },
            }),
          ),
        );
      }
    })();
    starting.catch(() => {});
    const kills = await runUnderKills({
      script,
      url: db.url,
      env: { SAGA_SET: 'tree' },
      workers: 3,
      maxKills: 15,
      what: `all ${SAGAS} sagas and their children ended`,
      timeoutMs: 90_000,
      done: async () => {
        await Promise.race([starting, Promise.resolve()]);
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM skiplock.sagas WHERE status IN ('completed', 'compensated')`,
        );
        return rows[0]!.n === SAGAS * 2;
      },
    });
    await starting;
    await runtime.close();
    expect(kills).toBeGreaterThan(0);

    // Each parent and its child ended as the input says; each history is exactly its timeline.
    const { rows } = await db.pool.query<{ id: string; status: string; timeline: string }>(
      `SELECT s.id, s.status,
              string_agg(st.kind || ':' || st.step || ':' || st.status, ' ' ORDER BY st.id) AS timeline
       FROM skiplock.sagas s JOIN skiplock.saga_steps st ON st.saga_id = s.id
       GROUP BY s.id`,
    );
    expect(rows).toHaveLength(SAGAS * 2);
    const expected = (id: string) => {
      const [, n, child] = /^o-(\d+)(\/ship)?$/.exec(id)!;
      const declined = decline(Number(n));
      if (child) {
        return declined
          ? 'compensated step:pack:completed step:label:completed ' +
              'compensation:label:completed compensation:pack:completed'
          : 'completed step:pack:completed step:label:completed';
      }
      return declined
        ? 'compensated step:reserve:completed step:ship:completed step:charge:failed ' +
            'compensation:ship:completed compensation:reserve:completed'
        : 'completed step:reserve:completed step:ship:completed step:charge:completed ' +
            'step:notify:completed';
    };
    const wrong = rows.filter((r) => `${r.status} ${r.timeline}` !== expected(r.id));
    expect(wrong).toEqual([]);

    // No effect twice: one row per idempotency key, and the count each outcome implies.
    const effects = await readEffects(db.pool, 'saga_tree');
    expect(effects.repeated).toEqual([]);
    const declined = Array.from({ length: SAGAS }, (_, n) => n).filter(decline).length;
    // pack, label, charge, notify per completed order; pack, label and their undoing per declined.
    expect(effects.keys).toBe((SAGAS - declined) * 4 + declined * 4);
    // reserve per order, and its release per declined one.
    expect(effects.external.keys).toBe(SAGAS + declined);
    console.log(
      `[saga children crash] ${SAGAS} sagas with a child each, ${kills} SIGKILLs, ` +
        `${effects.external.calls - effects.external.keys} duplicate external calls absorbed`,
    );
  });
});
