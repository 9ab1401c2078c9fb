import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { checkEnqueueOptions, enqueueOptionsSchema } from '../src/client.js';
import { createClient, defineJob, InvalidPayloadError } from '../src/index.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { quiet } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

const ship = defineJob({
  type: 'ship',
  queue: 'orders',
  payload: z.object({ orderId: z.string(), address: z.object({ zip: z.string().length(5) }) }),
  handler: async () => {},
});

const order = (orderId: string) => ({ orderId, address: { zip: '12345' } });

/** A one-connection pool whose statements are counted, and its client. */
function countedClient(options: { preparedStatements?: boolean; logger?: typeof quiet } = {}) {
  const pool = db.newPool(1);
  const counter = { statements: 0 };
  const original = pool.query.bind(pool);
  pool.query = ((...args: Parameters<typeof original>) => {
    counter.statements += 1;
    return original(...args);
  }) as typeof pool.query;
  return { pool, counter, client: createClient({ pool, logger: quiet, ...options }) };
}

async function jobsWithKey(key: string): Promise<{ id: string }[]> {
  const { rows } = await db.pool.query<{ id: string }>(
    'SELECT id::text FROM skiplock.jobs WHERE idempotency_key = $1',
    [key],
  );
  return rows;
}

describe('single enqueue', () => {
  it('sends one statement when nothing conflicts, with or without a key', async () => {
    const { counter, client: counted } = countedClient();
    await counted.enqueue(ship, order('s1'));
    expect(counter.statements).toBe(1);
    await counted.enqueue(ship, order('s2'), { idempotencyKey: 'one-statement' });
    expect(counter.statements).toBe(2);
    // A duplicate costs one more statement: the id of the job holding the key.
    const dup = await counted.enqueue(ship, order('s2'), { idempotencyKey: 'one-statement' });
    expect(dup.inserted).toBe(false);
    expect(counter.statements).toBe(4);
  });

  it('prepares its statement once per connection, or not at all when told not to', async () => {
    const prepared = async (pool: pg.Pool) => {
      const { rows } = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_prepared_statements WHERE name LIKE 'skiplock_%'`,
      );
      return rows[0]!.n;
    };
    const on = countedClient();
    await on.client.enqueue(ship, order('p1'));
    await on.client.enqueue(ship, order('p2'));
    expect(await prepared(on.pool)).toBe(1);
    const off = countedClient({ preparedStatements: false });
    await off.client.enqueue(ship, order('p3'));
    expect(await prepared(off.pool)).toBe(0);
  });

  it('stores what the bulk path stores: defaults, options and a database-clock delay', async () => {
    const runAt = new Date(Date.now() + 3_600_000);
    const a = await client.enqueue(ship, order('o1'), { priority: 7, maxAttempts: 2, runAt });
    const b = await client.enqueue(ship, order('o2'), { queue: 'elsewhere', delayMs: 60_000 });
    const { rows } = await db.pool.query<{
      id: string;
      queue: string;
      priority: number;
      max_attempts: number;
      run_at: Date;
      lease_ms: number;
      ahead_ms: number;
    }>(
      `SELECT id::text, queue, priority, max_attempts, run_at, lease_ms,
              (extract(epoch FROM run_at - now()) * 1000)::float8 AS ahead_ms
       FROM skiplock.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [[a.id, b.id]],
    );
    expect(rows[0]).toMatchObject({ queue: 'orders', priority: 7, max_attempts: 2 });
    expect(rows[0]!.run_at.getTime()).toBe(runAt.getTime());
    expect(rows[1]).toMatchObject({ queue: 'elsewhere', priority: 0, max_attempts: 5 });
    expect(rows[1]!.ahead_ms).toBeGreaterThan(55_000);
    expect(rows[1]!.lease_ms).toBe(30_000);
  });

  it('gives racing inserters of one key one job and the same id; keyless racers all insert', async () => {
    const pools = Array.from({ length: 8 }, () => db.newPool(1));
    const clients = pools.map((pool) => createClient({ pool, logger: quiet }));
    for (let round = 0; round < 10; round++) {
      const key = `single-race-${round}`;
      const results = await Promise.all(
        clients.map((c) => c.enqueue(ship, order(key), { idempotencyKey: key })),
      );
      expect(results.filter((r) => r.inserted)).toHaveLength(1);
      expect(new Set(results.map((r) => r.id)).size).toBe(1);
      expect(await jobsWithKey(key)).toEqual([{ id: results[0]!.id }]);
    }
    const keyless = await Promise.all(clients.map((c) => c.enqueue(ship, order('free'))));
    expect(keyless.every((r) => r.inserted)).toBe(true);
    expect(new Set(keyless.map((r) => r.id)).size).toBe(clients.length);
  });

  it('inside the caller transaction: sees its own earlier job, and a rollback frees the key', async () => {
    const conn = await db.pool.connect();
    try {
      await conn.query('BEGIN');
      const first = await client.enqueue(ship, order('t1'), { idempotencyKey: 'tx-key', tx: conn });
      const again = await client.enqueue(ship, order('t1'), { idempotencyKey: 'tx-key', tx: conn });
      expect(first.inserted).toBe(true);
      expect(again).toEqual({ id: first.id, inserted: false });
      await conn.query('ROLLBACK');
      expect(await jobsWithKey('tx-key')).toEqual([]);

      // The statement was first prepared inside the rolled-back transaction; it outlives it.
      await conn.query('BEGIN');
      const kept = await client.enqueue(ship, order('t1'), { idempotencyKey: 'tx-key', tx: conn });
      await conn.query('COMMIT');
      expect(kept.inserted).toBe(true);
      expect(await jobsWithKey('tx-key')).toEqual([{ id: kept.id }]);
    } finally {
      conn.release();
    }
  });

  it('waits for an uncommitted duplicate and inserts when that transaction rolls back', async () => {
    const a = await db.pool.connect();
    try {
      await a.query('BEGIN');
      const held = await client.enqueue(ship, order('w'), { idempotencyKey: 'rb-race', tx: a });
      const waiting = client.enqueue(ship, order('w'), { idempotencyKey: 'rb-race' });
      await a.query('ROLLBACK');
      const result = await waiting;
      expect(result.inserted).toBe(true);
      expect(result.id).not.toBe(held.id);
      expect(await jobsWithKey('rb-race')).toEqual([{ id: result.id }]);
    } finally {
      a.release();
    }
  });

  it('inserts again when the job holding the key is gone before its id is read', async () => {
    // A test-only trigger plays the pruner: it deletes the holder right after the conflicting
    // insert, in the same statement, so the lookup that follows finds nothing.
    await db.pool.query(`
      CREATE TABLE public.vanish_once (id bigint);
      CREATE FUNCTION public.vanish() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        DELETE FROM skiplock.jobs WHERE id IN (SELECT id FROM public.vanish_once);
        DELETE FROM public.vanish_once;
        RETURN NULL;
      END $$;
      CREATE TRIGGER vanish AFTER INSERT ON skiplock.jobs
        FOR EACH STATEMENT EXECUTE FUNCTION public.vanish();`);
    try {
      const first = await client.enqueue(ship, order('v'), { idempotencyKey: 'vanish' });
      await db.pool.query('INSERT INTO public.vanish_once VALUES ($1)', [first.id]);
      const second = await client.enqueue(ship, order('v'), { idempotencyKey: 'vanish' });
      expect(second.inserted).toBe(true);
      expect(second.id).not.toBe(first.id);
      expect(await jobsWithKey('vanish')).toEqual([{ id: second.id }]);
    } finally {
      await db.pool.query(`
        DROP TRIGGER vanish ON skiplock.jobs;
        DROP FUNCTION public.vanish();
        DROP TABLE public.vanish_once;`);
    }
  });

  it('runs every enqueue statement through a drizzle transaction as well', async () => {
    const orm = drizzle(db.pool);
    const runAt = new Date(Date.now() + 60_000);
    const ids = await orm.transaction(async (tx) => {
      const first = await client.enqueue(ship, order('z1'), { idempotencyKey: 'dz', tx, runAt });
      const dup = await client.enqueue(ship, order('z1'), { idempotencyKey: 'dz', tx });
      expect(dup).toEqual({ id: first.id, inserted: false });
      const uniform = await client.enqueueMany(ship, [{ payload: order('z2') }], { tx });
      const unkeyed = await client.enqueueMany(ship, [{ payload: order('z3'), priority: 4 }], {
        tx,
      });
      const keyed = await client.enqueueMany(
        ship,
        [{ payload: order('z1'), idempotencyKey: 'dz' }],
        { tx },
      );
      expect(keyed).toEqual([{ id: first.id, inserted: false }]);
      return [first.id, uniform[0]!.id, unkeyed[0]!.id];
    });
    const jobs = await Promise.all(ids.map((id) => client.getJob(id)));
    expect(jobs.map((j) => j?.status)).toEqual(['pending', 'pending', 'pending']);
    expect(jobs[0]!.runAt.getTime()).toBe(runAt.getTime());
    expect(jobs[2]!.priority).toBe(4);
  });

  it('refuses a bad payload naming the nested field, and inserts nothing', async () => {
    const logs = captureLogs();
    const strict = createClient({ pool: db.pool, logger: logs.logger });
    const bad = { orderId: 'b', address: { zip: '1' } };
    const error = await strict
      .enqueue(ship, bad, { idempotencyKey: 'bad-payload' })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidPayloadError);
    expect((error as Error).message).toContain('payload.address.zip');
    expect(logs.reasons()).toEqual(['invalid_payload']);
    expect(await jobsWithKey('bad-payload')).toEqual([]);
  });

  it('goes on unnamed when the server lost its prepared statement', async () => {
    const logs = captureLogs();
    const { pool, client: counted } = countedClient({ logger: logs.logger });
    await counted.enqueue(ship, order('d1'));
    // What a pooler that moves connections, or a DISCARD ALL, does to a prepared statement.
    await pool.query('DEALLOCATE ALL');
    const result = await counted.enqueue(ship, order('d2'));
    expect(result.inserted).toBe(true);
    expect(logs.reasons()).toEqual(['prepared_statements_off']);
    await pool.query('DEALLOCATE ALL');
    expect((await counted.enqueue(ship, order('d3'))).inserted).toBe(true);
    expect(logs.reasons()).toEqual(['prepared_statements_off']);

    // In the caller's transaction the failed statement cannot be sent again: the caller sees it.
    const other = countedClient({ logger: quiet });
    const conn = await other.pool.connect();
    try {
      await other.client.enqueue(ship, order('d4'), { tx: conn });
      await conn.query('DEALLOCATE ALL');
      await conn.query('BEGIN');
      await expect(other.client.enqueue(ship, order('d5'), { tx: conn })).rejects.toMatchObject({
        code: '26000',
      });
      await conn.query('ROLLBACK');
      await conn.query('BEGIN');
      expect((await other.client.enqueue(ship, order('d6'), { tx: conn })).inserted).toBe(true);
      await conn.query('COMMIT');
    } finally {
      conn.release();
    }
  });
});

describe('enqueue options check', () => {
  const cases: Record<string, unknown>[] = [
    {},
    { queue: 'a.b:c-d_e' },
    { queue: '' },
    { queue: 'has space' },
    { queue: 'q'.repeat(128) },
    { queue: 'q'.repeat(129) },
    { queue: 7 },
    { priority: 0 },
    { priority: -1_000_000 },
    { priority: 1_000_001 },
    { priority: 1.5 },
    { priority: Number.NaN },
    { priority: '1' },
    { runAt: new Date() },
    { runAt: new Date('nope') },
    { runAt: '2030-01-01' },
    { delayMs: 0 },
    { delayMs: -1 },
    { delayMs: 10 * 365 * 86_400_000 + 1 },
    { delayMs: Number.POSITIVE_INFINITY },
    { idempotencyKey: 'k' },
    { idempotencyKey: '' },
    { idempotencyKey: 'k'.repeat(512) },
    { idempotencyKey: 'k'.repeat(513) },
    { idempotencyKey: null },
    { maxAttempts: 1 },
    { maxAttempts: 0 },
    { maxAttempts: 1_001 },
    { maxAttempts: undefined, priority: undefined },
    { bogus: true },
    { payload: {} },
  ];

  it('accepts nothing the schema refuses, and everything it accepts it returns unchanged', () => {
    for (const options of cases) {
      const checked = checkEnqueueOptions(options);
      const parsed = enqueueOptionsSchema.safeParse(options);
      if (checked !== null) {
        expect(parsed.success, JSON.stringify(options)).toBe(true);
        expect(checked).toEqual(parsed.data);
      }
      // The cheap check is meant to take every valid option set, not to defer valid ones.
      expect(checked !== null, JSON.stringify(options)).toBe(parsed.success);
    }
  });
});
