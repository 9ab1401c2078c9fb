import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { createClient, defineJob } from '../src/index.js';
import { countByStatus, quiet, testWorker } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

/**
 * The worker sends its claim and batched completion as named prepared statements. A pool of one
 * connection lets the test read that connection's `pg_prepared_statements` and take them away.
 */
const onePool = () => db.newPool(1);

async function preparedNames(pool: pg.Pool): Promise<string[]> {
  const { rows } = await pool.query<{ name: string }>(
    `SELECT name FROM pg_prepared_statements WHERE name LIKE 'skiplock_%' ORDER BY name`,
  );
  return rows.map((r) => r.name.replace(/_[0-9a-f]{16}$/, ''));
}

describe('worker statements', () => {
  it('claims and completes with prepared statements, and goes on unnamed once they are lost', async () => {
    const queue = 'prepared-on';
    const handled: number[] = [];
    const job = defineJob({
      type: 'prepared.on',
      queue,
      payload: z.object({ n: z.number() }),
      handler: async (p) => void handled.push(p.n),
    });
    const pool = onePool();
    const logs = captureLogs();
    const running = testWorker(pool, [job], { logger: logs.logger, concurrency: 2 });
    await client.enqueueMany(
      job,
      [{ n: 1 }, { n: 2 }].map((payload) => ({ payload })),
    );
    expect(await running.runOnce()).toBe(2);
    expect(await preparedNames(pool)).toEqual(['skiplock_claim', 'skiplock_complete_batch']);
    expect(logs.reasons()).not.toContain('prepared_statements_off');

    // What a pooler that moves connections, or a DISCARD ALL, does to a prepared statement: the
    // next claim fails before it runs, is sent again unnamed, and nothing is lost or run twice.
    await pool.query('DEALLOCATE ALL');
    await client.enqueueMany(
      job,
      [{ n: 3 }, { n: 4 }].map((payload) => ({ payload })),
    );
    expect(await running.runOnce()).toBe(2);
    expect(logs.reasons().filter((r) => r === 'prepared_statements_off')).toHaveLength(1);
    expect(await preparedNames(pool)).toEqual([]);
    await client.enqueueMany(
      job,
      [{ n: 5 }].map((payload) => ({ payload })),
    );
    expect(await running.runOnce()).toBe(1);
    expect(handled.sort()).toEqual([1, 2, 3, 4, 5]);
    expect(await countByStatus(db.pool, queue)).toEqual({ completed: 5 });
    await running.stop();
  });

  it('sends nothing named with preparedStatements: false', async () => {
    const queue = 'prepared-off';
    const job = defineJob({
      type: 'prepared.off',
      queue,
      payload: z.object({ n: z.number() }),
      handler: async () => {},
    });
    const pool = onePool();
    const worker = testWorker(pool, [job], { preparedStatements: false });
    await client.enqueueMany(
      job,
      [{ n: 1 }, { n: 2 }, { n: 3 }].map((payload) => ({ payload })),
    );
    expect(await worker.runOnce()).toBe(3);
    expect(await preparedNames(pool)).toEqual([]);
    expect(await countByStatus(db.pool, queue)).toEqual({ completed: 3 });
    await worker.stop();
  });

  it('refuses a preparedStatements that is not a boolean, naming it', () => {
    const job = defineJob({ type: 'prepared.bad', payload: z.object({}), handler: async () => {} });
    expect(() =>
      testWorker(db.pool, [job], { preparedStatements: 'yes' as unknown as boolean }),
    ).toThrow(/preparedStatements/);
  });
});
