import { createWorker, type Worker } from '@skiplock/queue';
import { createSagaRuntime, defineSaga } from '@skiplock/saga';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { captureLogs, useTestDatabase } from '../support/db.js';
import { findPgbouncer, startPgbouncer } from '../support/pgbouncer.js';
import { waitFor } from '../support/wait.js';

const pgbouncer = findPgbouncer();
if (!pgbouncer) {
  console.warn(
    '[pgbouncer] SKIPPED the PgBouncer saga test: no `pgbouncer` binary on PATH or in /usr/sbin. ' +
      'Install it (Debian: apt-get install pgbouncer); .ci/run tries to.',
  );
}

const SAGAS = 30;
const STEPS = ['reserve', 'charge', 'ship'] as const;

/**
 * A saga's start and each step's completing transaction send their BEGIN with their first
 * statement (a named prepared statement once the connection has parsed it). Through PgBouncer in
 * transaction mode, the server connection under a client changes between transactions, so such a
 * statement can reach a server that never parsed it (before PgBouncer 1.21, or with
 * `max_prepared_statements = 0`): the transaction must fail before it commits anything and run
 * again unnamed, every step once. A PgBouncer that keeps prepared statements must give the same
 * outcome. The lost statement itself is tested without PgBouncer in begin-with.test.ts.
 */
describe('sagas through PgBouncer in transaction pooling mode', () => {
  it.skipIf(!pgbouncer)(
    'start and advance with BEGIN sent with the first statement, each step effect once',
    async () => {
      const db = await useTestDatabase();
      await db.pool.query(
        'CREATE TABLE bouncer_effects (saga text, step text, PRIMARY KEY (saga, step))',
      );
      const bouncer = await startPgbouncer(pgbouncer!, db.url, {
        poolMode: 'transaction',
        poolSize: 2,
      });
      const logs = captureLogs();
      const ran: string[] = [];
      const step = (name: (typeof STEPS)[number]) => ({
        run: (ctx: {
          sagaId: string;
          transaction: <T>(
            work: (tx: { query(text: string, values: unknown[]): Promise<unknown> }) => Promise<T>,
          ) => Promise<T>;
        }) => {
          ran.push(`${ctx.sagaId}/${name}`);
          return ctx.transaction(async (tx) => {
            await tx.query('INSERT INTO bouncer_effects (saga, step) VALUES ($1, $2)', [
              ctx.sagaId,
              name,
            ]);
            return { done: name };
          });
        },
      });
      const order = defineSaga({ name: 'bouncer-order', version: 1, input: z.object({}) })
        .step('reserve', step('reserve'))
        .step('charge', step('charge'))
        .step('ship', step('ship'));
      const runtime = createSagaRuntime({
        connectionString: bouncer.url,
        sagas: [order],
        logger: logs.logger,
      });
      const workers: Worker[] = [];
      try {
        for (const workerId of ['bouncer-saga-a', 'bouncer-saga-b']) {
          const worker = createWorker({
            connectionString: bouncer.url,
            workerId,
            jobs: runtime.jobs,
            listen: false,
            pollIntervalMs: 50,
            concurrency: 4,
            sweeper: false,
            retention: false,
            logger: logs.logger,
          });
          workers.push(worker);
          await worker.start();
        }
        runtime.attachWorker(workers[0]!);
        const ids = Array.from({ length: SAGAS }, (_, n) => `bounced-${n}`);
        for (const id of ids) {
          expect(await runtime.start(order, { id, input: {} })).toMatchObject({ started: true });
        }
        await waitFor(
          async () => {
            const { rows } = await db.pool.query<{ n: number }>(
              "SELECT count(*)::int AS n FROM skiplock.sagas WHERE status = 'completed'",
            );
            return rows[0]!.n === SAGAS;
          },
          { timeoutMs: 30_000, intervalMs: 100, what: 'every saga completed' },
        );
        const effects = await db.pool.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM bouncer_effects',
        );
        expect(effects.rows[0]!.n).toBe(SAGAS * STEPS.length);
        // Every step's handler ran once: a transaction run again after a lost prepared statement
        // re-runs the transaction's work, not the step.
        expect(ran).toHaveLength(SAGAS * STEPS.length);
        expect(new Set(ran).size).toBe(SAGAS * STEPS.length);
        const attempts = await db.pool.query<{ status: string; attempts: number; n: number }>(
          'SELECT status, attempts, count(*)::int AS n FROM skiplock.jobs GROUP BY 1, 2',
        );
        expect(attempts.rows).toEqual([
          { status: 'completed', attempts: 1, n: SAGAS * STEPS.length },
        ]);
      } finally {
        await Promise.all(workers.map((w) => w.stop({ timeoutMs: 2_000 })));
        await runtime.close();
        await bouncer.stop();
      }
    },
    60_000,
  );
});
