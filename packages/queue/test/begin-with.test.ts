import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { runStatement, withTransaction, type Opening } from '../src/db.js';
import { preparedRunner, withOwnTransaction } from '../src/prepared.js';

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
      const unnamed = opening('BEGIN ISOLATION LEVEL SERIALIZABLE');
      const beforeUnnamed = count();
      const c = await runStatement<{ isolation: string }>(client, insert(3), false, unnamed);
      expect(c.rows[0]!.isolation).toBe('serializable');
      expect(count() - beforeUnnamed).toBe(1);
      await client.query('COMMIT');
      expect(await stored()).toEqual([3]);
    } finally {
      // A failed assertion must not hand the pool a connection inside a transaction.
      await client.query('ROLLBACK').catch(() => {});
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
      // BEGIN ran: the failed statement aborted a transaction block, not an implicit one.
      await expect(client.query('SELECT 1')).rejects.toMatchObject({ code: '25P02' });
      await client.query('ROLLBACK');
      // An error is reported before its ReadyForQuery arrives, which may come in a later read
      // under load (the SELECT's did, once, in a local run of the whole suite), so the count is
      // read after a statement that succeeds: node-postgres answers one at its ReadyForQuery.
      // One for BEGIN and the statement, one for SELECT, one for ROLLBACK.
      expect(count()).toBe(3);
      expect((await client.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    } finally {
      // A failed assertion must not hand the pool a connection inside a transaction.
      await client.query('ROLLBACK').catch(() => {});
      client.release();
      await db.pool.query('DELETE FROM begin_with');
    }
  });

  it("sends a follow statement in the same round trip, which sees the first one's writes", async () => {
    const client = await db.pool.connect();
    const count = roundTrips(client);
    const follow = {
      name: 'begin_with_count',
      text: 'SELECT count(*)::int AS n, max(v) AS top FROM begin_with WHERE v >= $1',
      values: [60],
    };
    try {
      // First use of each named statement: BEGIN, then each with its Parse, one after the other.
      const fresh = { ...insert(60), name: 'begin_with_insert_then_count' };
      const first = await runStatement<{ v: number }>(client, fresh, true, opening(), follow);
      expect(first.rows).toEqual([{ v: 60, isolation: 'repeatable read' }]);
      expect(first.followed?.rows).toEqual([{ n: 1, top: 60 }]);
      expect(count()).toBe(3);
      await client.query('ROLLBACK');

      const before = count();
      const again = await runStatement<{ v: number }>(
        client,
        { ...fresh, values: [61] },
        true,
        opening(),
        follow,
      );
      expect(again.rows).toEqual([{ v: 61, isolation: 'repeatable read' }]);
      expect(again.rowCount).toBe(1);
      // Each result with its own columns and types, the count read after the insert.
      expect(again.followed).toEqual({ rows: [{ n: 1, top: 61 }], rowCount: 1 });
      expect(count() - before).toBe(1);
      await client.query('COMMIT');
      expect(await stored()).toEqual([61]);

      // Unnamed both (preparedStatements: false): parsed each time, still in one round trip.
      const beforeUnnamed = count();
      const unnamed = await runStatement(client, insert(62), false, opening(), follow);
      expect(unnamed.followed?.rows).toEqual([{ n: 2, top: 62 }]);
      expect(count() - beforeUnnamed).toBe(1);
      await client.query('ROLLBACK');
    } finally {
      await client.query('ROLLBACK').catch(() => {});
      client.release();
      await db.pool.query('DELETE FROM begin_with');
    }
  });

  it('skips the follow statement when the first fails, and fails on either error, the transaction aborted', async () => {
    await db.pool.query('INSERT INTO begin_with (v) VALUES (70)');
    const client = await db.pool.connect();
    const marker = {
      name: 'begin_with_marker',
      text: 'INSERT INTO begin_with (v) VALUES ($1) RETURNING v',
      values: [71],
    };
    try {
      // Both parsed on this connection, so the next ones go in one write.
      await runStatement(client, insert(72), true, opening(), marker);
      await client.query('ROLLBACK');
      const count = roundTrips(client);

      // The first fails (70 is taken): the follow does not run, the error is the first's.
      const first = await runStatement(client, insert(70), true, opening(), marker).catch((e) => e);
      expect(first).toMatchObject({ code: '23505' });
      await expect(client.query('SELECT 1')).rejects.toMatchObject({ code: '25P02' });
      await client.query('ROLLBACK');

      // The follow fails (70 is taken): the first's insert is in the aborted transaction.
      const second = await runStatement(client, insert(73), true, opening(), {
        ...marker,
        values: [70],
      }).catch((e) => e);
      expect(second).toMatchObject({ code: '23505' });
      await expect(client.query('SELECT 1')).rejects.toMatchObject({ code: '25P02' });
      await client.query('ROLLBACK');
      // Per failure: one write for BEGIN and both statements, the SELECT, the ROLLBACK.
      expect(count()).toBe(6);
      expect((await client.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    } finally {
      await client.query('ROLLBACK').catch(() => {});
      client.release();
    }
    expect(await stored()).toEqual([70]);
    await db.pool.query('DELETE FROM begin_with');
  });

  it('runs no statement after one whose value cannot be sent, nor any after a BEGIN that fails', async () => {
    const client = await db.pool.connect();
    const unsendable = {
      toPostgres: () => {
        throw new Error('this value cannot be sent');
      },
    };
    try {
      // Unnamed: node-postgres closes a named statement whose value it cannot send, and then
      // still counts it as parsed (its own behaviour, for one statement as for several).
      const refused = await runStatement(
        client,
        { ...insert(80), values: [unsendable] },
        false,
        opening(),
        insert(81),
      ).catch((e) => e);
      expect((refused as Error).message).toBe('this value cannot be sent');
      // BEGIN ran, the follow did not, and nothing failed on the server.
      const { rows } = await client.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM begin_with',
      );
      expect(rows).toEqual([{ n: 0 }]);
      await client.query('ROLLBACK');

      const badBegin = await runStatement(
        client,
        insert(82),
        false,
        opening('BEGIN ISOLATION LEVEL NONE'),
        insert(83),
      ).catch((e) => e);
      expect(badBegin).toMatchObject({ code: '42601' });
      // Neither statement ran, and no transaction was opened.
      expect((await client.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    } finally {
      await client.query('ROLLBACK').catch(() => {});
      client.release();
    }
    expect(await stored()).toEqual([]);
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

  it('fails in its transaction when the server lost the prepared statement, and runs again unnamed', async () => {
    const client = await db.pool.connect();
    try {
      await runStatement(client, insert(20), true, opening());
      await client.query('ROLLBACK');
      // What a pooler that moves connections does: the client believes the statement parsed.
      await client.query('DEALLOCATE ALL');
      const count = roundTrips(client);
      const lost = await runStatement(client, insert(21), true, opening()).catch((e) => e);
      expect(lost).toMatchObject({ code: '26000' });
      await expect(client.query('SELECT 1')).rejects.toMatchObject({ code: '25P02' });
      await client.query('ROLLBACK');
      // Read after a statement that succeeds, as in the test above: an error is reported before
      // its ReadyForQuery, which under load can come in a later read (the SELECT's did, in a
      // loaded run). One for BEGIN and the statement, one for SELECT, one for ROLLBACK.
      expect(count()).toBe(3);
    } finally {
      // A failed assertion must not hand the pool a connection inside a transaction.
      await client.query('ROLLBACK').catch(() => {});
      // Its client still believes the statement parsed: not one to give back to the pool.
      client.release(true);
    }
    expect(await stored()).toEqual([]);

    // The worker's and the saga runtime's way: the transaction runs again, unnamed, once.
    const one = db.newPool(1);
    const warm = await one.connect();
    await runStatement(warm, insert(22), true, opening());
    await warm.query('ROLLBACK');
    await warm.query('DEALLOCATE ALL');
    warm.release();
    const logs = captureLogs();
    const run = preparedRunner({ enabled: true, pool: one, logger: logs.logger, who: 'the test' });
    let tries = 0;
    const rows = await withOwnTransaction(
      one,
      async (tx, open) => {
        tries += 1;
        return (await run<{ v: number }>(tx, insert(23), open)).rows;
      },
      { opening: true },
    );
    expect(rows).toEqual([{ v: 23, isolation: 'read committed' }]);
    expect(tries).toBe(2);
    expect(logs.reasons()).toEqual(['prepared_statements_off']);
    expect(await stored()).toEqual([23]);
    await db.pool.query('DELETE FROM begin_with');
  });

  it('fails alone on a value that cannot be sent, its transaction open and usable', async () => {
    const client = await db.pool.connect();
    try {
      await runStatement(client, insert(30), true, opening());
      await client.query('ROLLBACK');
      const unsendable = {
        toPostgres: () => {
          throw new Error('this value cannot be sent');
        },
      };
      const error = await runStatement(
        client,
        { ...insert(31), values: [unsendable] },
        true,
        opening(),
      ).catch((e) => e);
      expect(error).toBeInstanceOf(Error);
      expect((error as Error).message).toBe('this value cannot be sent');
      // BEGIN ran and nothing failed on the server: the transaction takes statements.
      const { rows } = await client.query<{ isolation: string }>(
        "SELECT current_setting('transaction_isolation') AS isolation",
      );
      expect(rows).toEqual([{ isolation: 'repeatable read' }]);
      await client.query('ROLLBACK');
    } finally {
      // A failed assertion must not hand the pool a connection inside a transaction.
      await client.query('ROLLBACK').catch(() => {});
      client.release();
    }
    expect(await stored()).toEqual([]);
  });

  it('leaves no timer behind on a client with a query_timeout', async () => {
    // Every statement on this client must answer within it: 300 ms is not sure on a loaded run.
    const client = new pg.Client({ connectionString: db.url, query_timeout: 1_500 });
    await client.connect();
    try {
      await runStatement(client, insert(40), true, opening());
      await client.query('ROLLBACK');
      const ok = await runStatement<{ v: number }>(client, insert(41), true, opening());
      expect(ok.rows[0]!.v).toBe(41);
      await client.query('ROLLBACK');
      // A timer left running would fire after 1,500 ms, fail the finished query again and pulse
      // the client's queue: an idle client then emits 'drain'.
      let drains = 0;
      client.on('drain', () => (drains += 1));
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      expect(drains).toBe(0);
      // And the timeout still ends a statement that runs too long.
      const slow = {
        name: 'begin_with_slow',
        text: 'SELECT pg_sleep($1::float8) AS slept',
        values: [0],
      };
      await runStatement(client, slow, true, opening());
      await client.query('ROLLBACK');
      await expect(runStatement(client, { ...slow, values: [4] }, true, opening())).rejects.toThrow(
        'Query read timeout',
      );
    } finally {
      await client.end().catch(() => {});
    }
  });

  it('goes in two round trips on a client in node-postgres pipeline mode, which refuses custom queries', async () => {
    const client = new pg.Client({ connectionString: db.url, pipeline: true } as pg.ClientConfig);
    await client.connect();
    try {
      const result = await runStatement<{ v: number; isolation: string }>(
        client,
        insert(50),
        true,
        opening(),
      );
      expect(result.rows).toEqual([{ v: 50, isolation: 'repeatable read' }]);
      await client.query('ROLLBACK');
      const again = await runStatement<{ isolation: string }>(client, insert(51), true, opening());
      expect(again.rows[0]!.isolation).toBe('repeatable read');
      await client.query('ROLLBACK');
    } finally {
      await client.end();
    }
    expect(await stored()).toEqual([]);
  });
});
