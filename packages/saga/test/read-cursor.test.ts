import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readSagas, SagaError } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';

const db = await useTestDatabase();

const cursorOf = (value: unknown) =>
  Buffer.from(JSON.stringify(value), 'utf8').toString('base64url');

// Four completed sagas a second apart, newest first `c-4`. `c-2`'s one step recorded an output
// with a euro sign, which a LATIN1 session cannot be sent.
beforeAll(async () => {
  await db.pool.query(`
    INSERT INTO skiplock.sagas (id, name, version, status, input, created_at)
    SELECT 'c-' || g, 'pay', 1, 'completed', '{}'::jsonb,
           '2026-06-01 12:00:00+00'::timestamptz + g * interval '1 second'
    FROM generate_series(1, 4) g;
    INSERT INTO skiplock.saga_steps (saga_id, step, kind, status, attempts, output, finished_at)
    VALUES ('c-2', 'charge', 'step', 'completed', 1, '"charged 12 €"', now())`);
});

/** A pool that was ended: anything sent through it fails with pg's own error, not a SagaError. */
async function endedPool() {
  const pool = db.newPool(1);
  await pool.end();
  return pool;
}

describe('listSagas cursor: its structure checked before any statement, its time by PostgreSQL', () => {
  const time = '2026-06-01 12:00:03+00';
  const malformed: [string, unknown, RegExp][] = [
    ['not base64url', 'not a cursor!', /not base64url/],
    ['non-canonical base64url', 'abd', /not base64url/],
    ['not UTF-8', Buffer.from([0xff, 0xfe, 0x5b]).toString('base64url'), /UTF-8 JSON/],
    ['not JSON', Buffer.from('[hello', 'utf8').toString('base64url'), /UTF-8 JSON/],
    ['an object', { time, id: 'c-3' }, /\[time, id\] pair/],
    ['three fields', [time, 'c-3', 'x'], /\[time, id\] pair/],
    ['a numeric time', [1_780_315_203, 'c-3'], /time is a number/],
    ['a null time', [null, 'c-3'], /time is a null/],
    ['a numeric id', [time, 3], /saga id is a number/],
    ['an array id', [time, ['c-3']], /saga id is a array/],
    ['no time', ['not a time', 'c-3'], /not of the form/],
    ['a time without seconds', ['2026-06-01 12:00+00', 'c-3'], /not of the form/],
    ['a time without offset', ['2026-06-01 12:00:03', 'c-3'], /not of the form/],
    ['a zone name', ['2020-01-01 00:00:00 Mars/Olympus', 'c-3'], /not of the form/],
    ['infinity spelt otherwise', ['Infinity', 'c-3'], /not of the form/],
    ['an empty id', [time, ''], /saga id "" is not 1-200 characters/],
    ['a NUL in the id', [time, 'c\0-3'], /without whitespace or control characters/],
    ['a space in the id', [time, 'c 3'], /without whitespace or control characters/],
    ['a lone surrogate in the id', [time, 'c\ud800'], /without whitespace or control/],
    ['a 201-character id', [time, 'x'.repeat(201)], /"x{40}"\.\.\. is not 1-200 characters/],
  ];

  it.each(malformed)('refuses %s as invalid_cursor, naming the fault', async (_, value, why) => {
    const cursor = typeof value === 'string' ? value : cursorOf(value);
    for (const history of [false, true]) {
      // Refused before any statement: through an ended pool it is still the cursor's refusal.
      await expect(readSagas(await endedPool(), { cursor, history })).rejects.toMatchObject({
        code: 'invalid_cursor',
      });
      const refused = await readSagas(db.pool, { cursor, history }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(SagaError);
      expect(refused).toMatchObject({ code: 'invalid_cursor' });
      expect((refused as Error).message).toMatch(/is not a listSagas cursor: /);
      expect((refused as Error).message).toMatch(why);
    }
  });

  // Times of the right form that PostgreSQL refuses: judged by PostgreSQL's ::timestamptz, in a
  // statement of their own before the page's, and refused with its message.
  const unreadable: [string, string, RegExp][] = [
    ['year 300000', '300000-01-01 00:00:00+00', /timestamp out of range/],
    ['the first instant past the range', '294277-01-01 00:00:00+00', /timestamp out of range/],
    ['before 4714-11-24 BC', '4714-11-23 23:59:59.999999+00 BC', /timestamp out of range/],
    ['year 0', '0000-01-01 00:00:00+00', /date\/time field value out of range/],
    ['month 13', '2026-13-01 00:00:00+00', /date\/time field value out of range/],
    ['29 February 2026', '2026-02-29 00:00:00+00', /date\/time field value out of range/],
    ['hour 25', '2026-06-01 25:00:00+00', /date\/time field value out of range/],
    ['a 16-hour offset', '2026-06-01 12:00:00+16', /time zone displacement out of range/],
  ];

  it.each(unreadable)(
    'refuses a time of %s as invalid_cursor, by PostgreSQL',
    async (_, t, said) => {
      const cursor = cursorOf([t, 'c-3']);
      for (const history of [false, true]) {
        const refused = await readSagas(db.pool, { cursor, history }).catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(SagaError);
        expect(refused).toMatchObject({ code: 'invalid_cursor' });
        const { message } = refused as Error;
        expect(message).toMatch(/is not a listSagas cursor: PostgreSQL does not read its time /);
        expect(message).toContain(JSON.stringify(t));
        expect(message).toMatch(said);
      }
    },
  );

  it('refuses a cursor that is not a string', async () => {
    await expect(readSagas(db.pool, { cursor: 5 as never })).rejects.toMatchObject({
      code: 'invalid_cursor',
      message: expect.stringMatching(/it is a number, not a string/),
    });
  });

  it('takes every time PostgreSQL writes, to the edges of its range', async () => {
    for (const edge of [
      'infinity',
      '-infinity',
      '294276-12-31 23:59:59.999999+00',
      '294277-01-01 13:59:59+14',
      '4714-11-24 00:00:00+00 BC',
      '1800-01-01 00:00:00-04:56:02',
      '2024-02-29 23:59:59.5+05:45',
      '2026-06-01 12:00:03+00',
    ]) {
      const page = await readSagas(db.pool, { cursor: cursorOf([edge, 'c-3']) });
      expect(Array.isArray(page.sagas), edge).toBe(true);
    }
    const page = await readSagas(db.pool, { cursor: cursorOf(['2026-06-01 12:00:03+00', 'c-3']) });
    expect(page.sagas.map((s) => s.id)).toEqual(['c-2', 'c-1']);
  });

  it('pages with its own cursors in a session of another time zone', async () => {
    const nepal = new pg.Pool({ connectionString: db.url, options: '-c timezone=Asia/Kathmandu' });
    try {
      const ids: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await readSagas(nepal, { limit: 1, cursor, history: true });
        ids.push(...page.sagas.map((s) => s.id));
        cursor = page.nextCursor ?? undefined;
      } while (cursor);
      expect(ids).toEqual(['c-4', 'c-3', 'c-2', 'c-1']);
    } finally {
      await nepal.end();
    }
  });
});

describe('listSagas: a data error of the page, not the cursor, is not relabelled', () => {
  // A session in LATIN1 (pg decoding latin1 too; pg starts every session in UTF8, so it is set
  // on the pool's one connection): PostgreSQL cannot send it c-2's step output, and refuses with
  // 22P05, a data exception (class 22) that no cursor caused.
  const latin1 = new pg.Pool({ connectionString: db.url, client_encoding: 'latin1', max: 1 });
  afterAll(() => latin1.end());

  it('propagates untranslatable_character from the histories, with a good cursor', async () => {
    const session = await latin1.connect();
    await session.query("SET client_encoding = 'LATIN1'");
    session.release();
    const first = await readSagas(db.pool, { limit: 1 });
    expect(first.sagas.map((s) => s.id)).toEqual(['c-4']);
    const cursor = first.nextCursor!;
    // The cursor is good: without histories, over the LATIN1 session, it reads on.
    const page = await readSagas(latin1, { cursor, limit: 3 });
    expect(page.sagas.map((s) => s.id)).toEqual(['c-3', 'c-2', 'c-1']);
    // With histories the step output cannot be sent: PostgreSQL's own error, unchanged.
    const failed = await readSagas(latin1, { cursor, limit: 3, history: true }).catch(
      (e: unknown) => e,
    );
    expect(failed).not.toBeInstanceOf(SagaError);
    expect(failed).toMatchObject({
      code: '22P05',
      message: expect.stringMatching(/has no equivalent in encoding "LATIN1"/),
    });
    // The same error as without a cursor.
    await expect(readSagas(latin1, { history: true })).rejects.toMatchObject({ code: '22P05' });
  });

  it('propagates invalid_text_representation of a saga status the database lacks', async () => {
    // A database whose migrations are behind the code: its saga_status has no 'queued' (here
    // renamed away in this file's own database, and back after).
    await db.pool.query(`ALTER TYPE skiplock.saga_status RENAME VALUE 'queued' TO 'unmigrated'`);
    try {
      const cursor = (await readSagas(db.pool, { limit: 1 })).nextCursor!;
      for (const history of [false, true]) {
        const failed = await readSagas(db.pool, {
          status: ['queued', 'completed'],
          cursor,
          history,
        }).catch((e: unknown) => e);
        expect(failed).not.toBeInstanceOf(SagaError);
        expect(failed).toMatchObject({
          code: '22P02',
          message: expect.stringMatching(
            /invalid input value for enum skiplock.saga_status: "queued"/,
          ),
        });
      }
    } finally {
      await db.pool.query(`ALTER TYPE skiplock.saga_status RENAME VALUE 'unmigrated' TO 'queued'`);
    }
  });
});
