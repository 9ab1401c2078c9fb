import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../../test/support/db.js';
import { runStatement, withTransaction, type Opening } from '../src/db.js';

const db = await useTestDatabase();

beforeAll(async () => {
  await db.pool.query('CREATE TABLE begin_with (v int PRIMARY KEY)');
});
afterAll(async () => {
  await db.pool.query('DROP TABLE begin_with');
});

/** Round trips as the server counts them: one ReadyForQuery ends each. */
function roundTrips(client: pg.PoolClient): () => number {
  let seen = 0;
  const connection = (client as unknown as { connection: NodeJS.EventEmitter }).connection;
  connection.on('readyForQuery', () => (seen += 1));
  return () => seen;
}

const opening = (begin = 'BEGIN ISOLATION LEVEL REPEATABLE READ'): Opening => ({
  begin,
  sent: false,
});

const insert = (v: number) => ({
  name: 'begin_with_insert',
  text: `INSERT INTO begin_with (v) VALUES ($1) RETURNING v, current_setting('transaction_isolation') AS isolation`,
  values: [v],
});

async function stored(): Promise<number[]> {
  const { rows } = await db.pool.query<{ v: number }>('SELECT v FROM begin_with ORDER BY v');
  return rows.map((r) => r.v);
}

describe('a statement that opens its transaction', () => {
  it('runs after its BEGIN in one round trip once its connection has parsed it', async () => {
    const client = await db.pool.connect();
    try {
      const count = roundTrips(client);
      // First use of the named statement: BEGIN, then the statement with its Parse.
      const first = opening();
      const a = await runStatement<{ v: number; isolation: string }>(
        client,
        insert(1),
        true,
        first,
      );
      expect(first.sent).toBe(true);
      expect(a.rows).toEqual([{ v: 1, isolation: 'repeatable read' }]);
      expect(count()).toBe(2);
      await client.query('ROLLBACK');

      const second = opening();
      const before = count();
      const b = await runStatement<{ v: number; isolation: string }>(
        client,
        insert(2),
        true,
        second,
      );
      expect(b.rows).toEqual([{ v: 2, isolation: 'repeatable read' }]);
      expect(b.rowCount).toBe(1);
      expect(count() - before).toBe(1);
      // Inside the transaction BEGIN opened: rolled back, nothing stays.
      await client.query('ROLLBACK');
      expect(await stored()).toEqual([]);

      // Unnamed (preparedStatements: false): parsed each time, in the same round trip.
      const unnamed = opening('BEGIN ISOLATION LEVEL READ COMMITTED');
      const beforeUnnamed = count();
      const c = await runStatement<{ isolation: string }>(client, insert(3), false, unnamed);
      expect(c.rows[0]!.isolation).toBe('read committed');
      expect(count() - beforeUnnamed).toBe(1);
      await client.query('COMMIT');
      expect(await stored()).toEqual([3]);
    } finally {
      client.release();
      await db.pool.query('DELETE FROM begin_with');
    }
  });

  it('fails alone and leaves its transaction open and aborted, the connection usable', async () => {
    await db.pool.query('INSERT INTO begin_with (v) VALUES (7)');
    const client = await db.pool.connect();
    try {
      await runStatement(client, insert(8), true, opening());
      await client.query('ROLLBACK');
      const count = roundTrips(client);
      const error = await runStatement(client, insert(7), true, opening()).catch((e) => e);
      expect(error).toMatchObject({ code: '23505' });
      expect(count()).toBe(1);
      // BEGIN ran: the failed statement aborted a transaction block, not an implicit one.
      await expect(client.query('SELECT 1')).rejects.toMatchObject({ code: '25P02' });
      await client.query('ROLLBACK');
      expect((await client.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    } finally {
      client.release();
      await db.pool.query('DELETE FROM begin_with');
    }
  });

  it('is refused on a pool, whose connections would split BEGIN from the statement', async () => {
    await expect(runStatement(db.pool, insert(1), true, opening())).rejects.toThrow(
      /opens on a client, not on a pool/,
    );
    expect(await stored()).toEqual([]);
  });

  it('commits through withTransaction, which sends no COMMIT or ROLLBACK when nothing opened it', async () => {
    const value = await withTransaction(
      db.pool,
      async (tx, open) => {
        await runStatement(tx, insert(4), true, open);
        return 'done';
      },
      { opening: true },
    );
    expect(value).toBe('done');
    expect(await stored()).toEqual([4]);

    const notices: string[] = [];
    const watch = (client: pg.PoolClient) => {
      client.on('notice', (n) => notices.push(n.message ?? ''));
    };
    // Neither sends a statement: without a BEGIN, a COMMIT or ROLLBACK would draw a warning.
    expect(
      await withTransaction(db.pool, async (tx) => (watch(tx), 'nothing'), { opening: true }),
    ).toBe('nothing');
    await expect(
      withTransaction(
        db.pool,
        async (tx) => {
          watch(tx);
          throw new Error('before any statement');
        },
        { opening: true },
      ),
    ).rejects.toThrow('before any statement');
    // The second one's rollback path ran: its connection went back to the pool healthy.
    expect((await db.pool.query('SELECT count(*)::int AS n FROM begin_with')).rows).toEqual([
      { n: 1 },
    ]);
    expect(notices).toEqual([]);
    await db.pool.query('DELETE FROM begin_with');
  });
});
