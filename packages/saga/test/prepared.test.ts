import { createWorker } from '@skiplock/queue';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createSagaRuntime, defineSaga } from '../src/index.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { fast, settled, silent, timeline } from './fixtures.js';

const db = await useTestDatabase();

/**
 * The saga's statements go out as named prepared statements. One connection for the runtime and
 * its worker lets the test read that connection's `pg_prepared_statements` and take them away
 * (the worker does not listen: it would claim on its LISTEN connection, out of their reach).
 */
/**
 * The test database's pool of one: ended before the database is dropped, and its connection's end
 * by the drop never an uncaught error (a pool of this file's own had no error listener, and a
 * fresh-clone CI run once failed on that).
 */
const onePool = (): pg.Pool => db.newPool(1);

async function prepared(pool: pg.Pool): Promise<string[]> {
  const { rows } = await pool.query<{ name: string }>(
    `SELECT DISTINCT regexp_replace(name, '_[0-9a-f]{16}$', '') AS name
     FROM pg_prepared_statements WHERE name LIKE 'skiplock_%' ORDER BY 1`,
  );
  return rows.map((r) => r.name);
}

const effects: string[] = [];
const saga = defineSaga({ name: 'prepared', version: 1, input: z.object({ n: z.number() }) })
  .step('a', { ...fast, run: (ctx) => void effects.push(`a${ctx.input.n}`), compensate: () => {} })
  .step('b', { ...fast, run: (ctx) => void effects.push(`b${ctx.input.n}`) });

function start(pool: pg.Pool, preparedStatements?: boolean, logger = silent) {
  const flag = preparedStatements === undefined ? {} : { preparedStatements };
  const runtime = createSagaRuntime({ pool, sagas: [saga], logger, ...flag });
  const worker = createWorker({
    pool,
    jobs: runtime.jobs,
    logger,
    concurrency: 1,
    listen: false,
    pollIntervalMs: 20,
    sweeper: false,
    retention: false,
    ...flag,
  });
  return { runtime, worker };
}

describe('saga statements', () => {
  it('are prepared once per connection, and lost prepared statements cost no attempt', async () => {
    const pool = onePool();
    const logs = captureLogs();
    const { runtime, worker } = start(pool, undefined, logs.logger);
    await worker.start();
    try {
      await runtime.start(saga, { id: 'p1', input: { n: 1 } });
      expect((await settled(runtime, 'p1')).status).toBe('completed');
      expect(await prepared(pool)).toEqual(
        expect.arrayContaining(['skiplock_claim', 'skiplock_complete', 'skiplock_saga']),
      );
      expect(logs.reasons()).not.toContain('prepared_statements_off');

      // What a pooler that moves connections, or a DISCARD ALL, does to prepared statements.
      await pool.query('DEALLOCATE ALL');
      await runtime.start(saga, { id: 'p2', input: { n: 2 } });
      const done = await settled(runtime, 'p2');
      expect(done.status).toBe('completed');
      expect(timeline(done)).toEqual(['a:completed', 'b:completed']);
      // Each sender that met a lost statement (the saga runtime, its client, the worker) turned
      // them off, once; the transactions they failed in were run again, so no step attempt was
      // spent and each step's effect happened once. Which senders meet one depends on timing: a
      // statement that fails through pool.query destroys its connection (pg-pool releases it
      // with the error), and on the new one every name is prepared afresh (a fresh-clone CI run
      // once saw only the runtime and the worker).
      const off = logs.lines
        .filter((l) => l.reason === 'prepared_statements_off')
        .map((l) => String(l.msg).split('); ')[1]!.split(' sends')[0]!);
      expect(off.length).toBeGreaterThan(0);
      expect(new Set(off).size).toBe(off.length);
      for (const sender of off) {
        expect(['enqueue', 'the saga runtime', 'the worker']).toContain(sender);
      }
      expect(done.history.map((h) => h.attempts)).toEqual([1, 1]);
      expect(effects.filter((e) => e.endsWith('2'))).toEqual(['a2', 'b2']);
      // A sender that turned them off prepares nothing more.
      const left = await prepared(pool);
      if (off.includes('the saga runtime')) expect(left).not.toContain('skiplock_saga');
      if (off.includes('the worker')) expect(left).not.toContain('skiplock_claim');
    } finally {
      await worker.stop({ timeoutMs: 1_000 });
      await runtime.close();
    }
  });

  it('go unnamed with preparedStatements: false', async () => {
    const pool = onePool();
    const { runtime, worker } = start(pool, false);
    await worker.start();
    try {
      await runtime.start(saga, { id: 'u1', input: { n: 3 } });
      expect((await settled(runtime, 'u1')).status).toBe('completed');
      expect(await prepared(pool)).toEqual([]);
    } finally {
      await worker.stop({ timeoutMs: 1_000 });
      await runtime.close();
    }
  });
});

describe('a step transaction whose prepared statement a pooler lost after its work ran', () => {
  it('fails the attempt when the run again returns another result than the step has; the step runs again', async () => {
    await db.pool.query('CREATE TABLE prepared_orders (id serial PRIMARY KEY, saga text)');
    const calls: number[] = [];
    let loseOnce = false;
    const orders = defineSaga({ name: 'prepared-orders', version: 1, input: z.object({}) })
      .step('a', {
        ...fast,
        run: async (ctx) => {
          const id = await ctx.transaction(async (tx) => {
            const { rows } = await tx.query<{ id: number }>(
              'INSERT INTO prepared_orders (saga) VALUES ($1) RETURNING id',
              [ctx.sagaId],
            );
            calls.push(rows[0]!.id);
            if (loseOnce) {
              loseOnce = false;
              // As PgBouncer in transaction mode before 1.21 would: the saga's record statement
              // is gone from the server connection by the time the step's output is recorded.
              const { rows: named } = await tx.query<{ name: string }>(
                `SELECT name FROM pg_prepared_statements WHERE statement LIKE '%settled AS (%'`,
              );
              for (const { name } of named) await tx.query(`DEALLOCATE "${name}"`);
            }
            return rows[0]!.id;
          });
          return { orderId: id };
        },
      })
      .step('b', { ...fast, run: () => 'b' });
    const pool = onePool();
    const runtime = createSagaRuntime({ pool, sagas: [orders], logger: silent });
    const worker = createWorker({
      pool,
      jobs: runtime.jobs,
      logger: silent,
      concurrency: 1,
      listen: false,
      pollIntervalMs: 20,
      sweeper: false,
      retention: false,
    });
    await worker.start();
    try {
      // The one connection prepares the saga's statements first.
      await runtime.start(orders, { id: 'orders-warm', input: {} });
      expect((await settled(runtime, 'orders-warm')).status).toBe('completed');
      calls.length = 0;
      loseOnce = true;
      await runtime.start(orders, { id: 'orders-1', input: {} });
      const view = await settled(runtime, 'orders-1');
      expect(view.status).toBe('completed');
      const { rows } = await db.pool.query<{ id: number }>(
        `SELECT id FROM prepared_orders WHERE saga = 'orders-1'`,
      );
      // The transaction run again in place drew another id than the run the step has: that
      // attempt failed, and the next ran the whole step. One committed order, and the output
      // names it.
      expect(calls).toHaveLength(3);
      expect(rows).toEqual([{ id: calls[2] }]);
      const a = view.history.find((h) => h.step === 'a');
      expect(a).toMatchObject({ output: { orderId: calls[2] }, attempts: 2 });
    } finally {
      await worker.stop({ timeoutMs: 1_000 });
      await runtime.close();
    }
  });
});
