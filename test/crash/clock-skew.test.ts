import { setTimeout as delay } from 'node:timers/promises';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { createSagaRuntime } from '../../packages/saga/src/index.js';
import { bundleForNode } from '../support/bundle.js';
import { useTestDatabase } from '../support/db.js';
import { spawnNode } from '../support/processes.js';
import { waitFor } from '../support/wait.js';
import { napSaga, SKEW_SCHEMA_SQL } from './skew-saga.js';

describe('a saga worker whose host clock runs 10 minutes ahead of the database', () => {
  it('sleeps until a time by the database clock: not before it, and wakes after it', async () => {
    const db = await useTestDatabase();
    await db.pool.query(SKEW_SCHEMA_SQL);
    const script = await bundleForNode(new URL('./skew-worker-process.ts', import.meta.url));
    const worker = spawnNode('skewed', script, {
      DATABASE_URL: db.url,
      SAGA_WORKER_ID: 'skewed',
      SKEW_MS: String(10 * 60_000),
    });
    const runtime = createSagaRuntime({
      pool: db.pool,
      sagas: [napSaga],
      logger: pino({ level: 'silent' }),
    });
    try {
      await worker.waitForLine((l) => l.reason === 'started', 60_000);
      const { rows } = await db.pool.query<{ wake: Date }>(
        `SELECT now() + interval '6 seconds' AS wake`,
      );
      const wakeAt = rows[0]!.wake;
      await runtime.start(napSaga, { id: 'nap-1', input: { wakeAt: wakeAt.toISOString() } });
      const woke = async () =>
        (
          await db.pool.query<{ status: string; at: Date | null }>(
            `SELECT s.status, w.at FROM skiplock.sagas s
             LEFT JOIN skew.woke w ON w.saga_id = s.id WHERE s.id = 'nap-1'`,
          )
        ).rows[0];
      // Before: the worker turned the wake time into a delay by its own clock, 10 minutes ahead,
      // so the saga went on at once and completed within a second.
      await delay(3_000);
      expect(await woke()).toMatchObject({ status: 'waiting', at: null });
      const done = await waitFor(
        async () => {
          const row = await woke();
          return row?.status === 'completed' ? row : null;
        },
        { what: 'the saga to wake and complete', timeoutMs: 30_000 },
      );
      expect(done.at!.getTime()).toBeGreaterThanOrEqual(wakeAt.getTime());
    } finally {
      await runtime.close();
      worker.kill('SIGTERM');
      await worker.exited;
    }
  }, 90_000);
});
