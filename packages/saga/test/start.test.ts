import { drizzle } from 'drizzle-orm/node-postgres';
import { describe, expect, it } from 'vitest';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import { z } from 'zod';
import {
  createSagaRuntime,
  defineSaga,
  readSagas,
  SagaInputMismatchError,
  SagaValidationError,
  UnknownSagaError,
} from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { fast, settled, silent, startSagas } from './fixtures.js';

const db = await useTestDatabase();

const greet = defineSaga({ name: 'greet', version: 1, input: z.object({ who: z.string() }) })
  .step('hello', { ...fast, run: (ctx, input) => `hello ${input.who}` })
  .step('bye', { ...fast, run: (ctx) => `${ctx.steps.hello}, bye` });

const count = async (table: string) =>
  Number((await db.pool.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n);

describe('starting a saga', () => {
  it('is idempotent by id: concurrent starts make one saga and one job per step', async () => {
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [greet], logger: silent });
    const results = await Promise.all(
      Array.from({ length: 5 }, () => runtime.start(greet, { id: 'one', input: { who: 'a' } })),
    );
    expect(results.filter((r) => r.started)).toHaveLength(1);
    expect(results.every((r) => r.id === 'one' && r.status === 'running')).toBe(true);
    const { runtime: working } = await startSagas(db.pool, [greet]);
    const done = await settled(working, 'one');
    expect(done.status).toBe('completed');
    expect(done.history.map((h) => h.output)).toEqual(['hello a', 'hello a, bye']);
    expect(await runtime.start(greet, { id: 'one', input: { who: 'a' } })).toEqual({
      id: 'one',
      started: false,
      status: 'completed',
    });
    const keys = await db.pool.query(
      `SELECT idempotency_key FROM skiplock.jobs WHERE idempotency_key LIKE 'saga:one:%' ORDER BY id`,
    );
    expect(keys.rows.map((r) => r.idempotency_key)).toEqual(['saga:one:hello', 'saga:one:bye']);
    await runtime.close();
  });

  it('refuses a repeated start with a different input, and keeps the first input', async () => {
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [greet], logger: silent });
    const loose = defineSaga({
      name: 'loose',
      version: 1,
      input: z.record(z.string(), z.unknown()),
    }).step('only', { ...fast, run: () => 'ok' });
    const both = createSagaRuntime({ pool: db.pool, sagas: [greet, loose], logger: silent });
    await runtime.start(greet, { id: 'twice', input: { who: 'a' } });
    const clash = await runtime
      .start(greet, { id: 'twice', input: { who: 'b' } })
      .catch((e: unknown) => e);
    expect(clash).toBeInstanceOf(SagaInputMismatchError);
    expect(clash).toMatchObject({
      code: 'saga_input_mismatch',
      sagaId: 'twice',
      status: 'running',
    });
    // The message names the saga, never the input.
    expect((clash as Error).message).toContain('"twice"');
    expect((clash as Error).message).not.toMatch(/\bb\b|who/);
    expect((await runtime.getSaga('twice'))?.input).toEqual({ who: 'a' });

    // Equal as JSON is the same input: key order and number spelling do not matter.
    await both.start(loose, { id: 'keys', input: { a: 1, b: [1.5, 'x'], c: { d: null } } });
    expect(
      await both.start(loose, { id: 'keys', input: { c: { d: null }, b: [1.5, 'x'], a: 1.0 } }),
    ).toMatchObject({ started: false });
    for (const other of [
      { a: 1 },
      { a: 1, b: [1.5, 'x'], c: { d: 0 } },
      { a: 1, b: ['x', 1.5], c: { d: null } },
    ]) {
      await expect(both.start(loose, { id: 'keys', input: other })).rejects.toBeInstanceOf(
        SagaInputMismatchError,
      );
    }
    // Inside the caller's transaction the error reaches the caller too.
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await expect(
        runtime.start(greet, { id: 'twice', input: { who: 'c' }, tx: client }),
      ).rejects.toBeInstanceOf(SagaInputMismatchError);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    await both.close();
    await runtime.close();
  });

  it('joins the caller transaction: a rollback leaves no saga and no job', async () => {
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [greet], logger: silent });
    const [sagasBefore, jobsBefore] = [await count('skiplock.sagas'), await count('skiplock.jobs')];
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      expect(
        (await runtime.start(greet, { id: 'ghost', input: { who: 'x' }, tx: client })).started,
      ).toBe(true);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await runtime.getSaga('ghost')).toBeNull();
    expect(await count('skiplock.sagas')).toBe(sagasBefore);
    expect(await count('skiplock.jobs')).toBe(jobsBefore);
    expect(await count("skiplock.saga_steps WHERE saga_id = 'ghost'")).toBe(0);

    // The same, committed, through a drizzle transaction.
    await drizzle(db.pool).transaction(async (tx) => {
      await runtime.start(greet, { id: 'real', input: { who: 'y' }, tx });
    });
    const { runtime: working } = await startSagas(db.pool, [greet]);
    expect((await settled(working, 'real')).status).toBe('completed');
    await runtime.close();
  });

  it('refuses bad input, naming the field, and definitions the runtime does not know', async () => {
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [greet], logger: silent });
    const bad = await runtime
      .start(greet, { id: 'bad', input: { who: 3 as unknown as string } })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(SagaValidationError);
    expect((bad as Error).message).toMatch(/^invalid input of saga "greet": input\.who: /);
    const other = defineSaga({ name: 'other', version: 1, input: z.object({}) }).step('a', {
      run: () => 1,
    });
    await expect(runtime.start(other, { id: 'o', input: {} })).rejects.toThrow(UnknownSagaError);
    await expect(runtime.start(other, { id: 'o', input: {} })).rejects.toThrow(
      'saga "other" version 1 is not registered with this runtime',
    );
    await expect(runtime.start(greet, { id: '', input: { who: 'a' } })).rejects.toThrow(
      /^invalid saga id: id: must not be empty$/,
    );
    expect(await runtime.getSaga('bad')).toBeNull();
    await runtime.close();
  });

  it('refuses an id already used by a saga of another name', async () => {
    const other = defineSaga({ name: 'other', version: 1, input: z.object({}) }).step('a', {
      run: () => 1,
    });
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [greet, other], logger: silent });
    await runtime.start(greet, { id: 'shared', input: { who: 'a' } });
    await expect(runtime.start(other, { id: 'shared', input: {} })).rejects.toThrow(
      'saga id "shared" is already used by a saga "greet"',
    );
    await runtime.close();
  });

  it('rejects a runtime without sagas, or with one listed twice', () => {
    expect(() => createSagaRuntime({ pool: db.pool, sagas: [] })).toThrow(/at least one saga/);
    expect(() => createSagaRuntime({ pool: db.pool, sagas: [greet, greet] })).toThrow(
      'saga "greet" version 1 is listed twice',
    );
  });
});

describe('reading sagas', () => {
  it('lists sagas newest first by status and name, page by page', async () => {
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [greet], logger: silent });
    for (let i = 0; i < 7; i++)
      await runtime.start(greet, { id: `list-${i}`, input: { who: `${i}` } });
    const seen: string[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 10; page++) {
      const { sagas, nextCursor } = await runtime.listSagas({
        name: 'greet',
        status: 'running',
        limit: 3,
        cursor,
      });
      seen.push(...sagas.map((s) => s.id));
      if (!nextCursor) break;
      cursor = nextCursor;
    }
    const running = seen.filter((id) => id.startsWith('list-'));
    expect(running).toEqual(['list-6', 'list-5', 'list-4', 'list-3', 'list-2', 'list-1', 'list-0']);
    expect((await runtime.listSagas({ status: ['completed'], name: 'nope' })).sagas).toEqual([]);
    await expect(runtime.listSagas({ status: 'done' as 'completed' })).rejects.toThrow(
      /unknown saga status "done"/,
    );
    await expect(runtime.listSagas({ cursor: 'garbage' })).rejects.toThrow(
      /not a listSagas cursor/,
    );
    await expect(runtime.listSagas({ limit: 0 })).rejects.toThrow(/limit must be/);
    // Each refused by name, as SagaErrors the dashboard and CLI map to a 400 or a usage error
    // (before: PostgreSQL's 22007, 22021 and 22003, and a TypeError, "not iterable").
    const cursorOf = (value: unknown) =>
      Buffer.from(JSON.stringify(value), 'utf8').toString('base64url');
    await expect(
      runtime.listSagas({ cursor: cursorOf(['not a time', 'list-1']) }),
    ).rejects.toMatchObject({ code: 'invalid_cursor' });
    await expect(
      runtime.listSagas({ cursor: cursorOf(['2026-01-01 00:00:00+00', 'a\0b']) }),
    ).rejects.toMatchObject({ code: 'invalid_cursor' });
    // A zone offset past 15 hours (22009) and an unknown zone name (22023): before, PostgreSQL's.
    for (const time of ['2020-01-01 00:00 +25:00', '2020-01-01 00:00 Mars/Olympus']) {
      await expect(runtime.listSagas({ cursor: cursorOf([time, 'list-1']) })).rejects.toMatchObject(
        { code: 'invalid_cursor' },
      );
    }
    await expect(runtime.listSagas({ name: 'a\0b' })).rejects.toMatchObject({
      code: 'invalid_name',
    });
    await expect(runtime.listSagas({ version: 2 ** 40 })).rejects.toMatchObject({
      code: 'invalid_version',
    });
    await expect(runtime.listSagas({ status: 5 as never })).rejects.toMatchObject({
      code: 'invalid_status',
    });
    expect(await runtime.getSaga('list-nope')).toBeNull();
    await runtime.close();
  });

  it('lists a page of sagas with their step histories in two statements, not one per saga', async () => {
    const hist = defineSaga({ name: 'hist', version: 1, input: z.object({ fail: z.boolean() }) })
      .step('a', { ...fast, run: () => 'a', compensate: () => {} })
      .step('b', {
        ...fast,
        maxAttempts: 1,
        run: (ctx) => {
          if (ctx.input.fail) throw new Error('b broke');
          return 'b';
        },
      });
    const { runtime } = await startSagas(db.pool, [hist]);
    const ids = ['h-ok-1', 'h-bad', 'h-ok-2'];
    for (const id of ids) await runtime.start(hist, { id, input: { fail: id === 'h-bad' } });
    const views = await Promise.all(ids.map((id) => settled(runtime, id)));
    // Statements counted on every connection of a pool of their own (the pool's own queries go
    // through them too); the snapshot's BEGIN and COMMIT are not statements of the read.
    let statements = 0;
    const counted = db.newPool(2);
    counted.on('connect', (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
      Object.assign(client, {
        query: (...args: unknown[]) => {
          const text = typeof args[0] === 'string' ? args[0] : '';
          if (!/^(BEGIN|COMMIT|ROLLBACK)\b/.test(text)) statements += 1;
          return query(...args);
        },
      });
    });
    const { sagas } = await readSagas(counted, { name: 'hist', history: true });
    expect(statements).toBe(2);
    expect(sagas.map((s) => s.id).sort()).toEqual([...ids].sort());
    for (const saga of sagas) {
      expect(saga.history).toEqual(views.find((v) => v.id === saga.id)!.history);
    }
    const bad = sagas.find((s) => s.id === 'h-bad')!;
    expect(bad.history!.map((h) => `${h.kind}:${h.step}:${h.status}`)).toEqual([
      'step:a:completed',
      'step:b:failed',
      'compensation:a:completed',
    ]);
    // Without the option, summaries carry no history.
    expect((await runtime.listSagas({ name: 'hist' })).sagas[0]).not.toHaveProperty('history');
  });
});

// A validator skiplock cannot look into: accepts Date instances only.
const dateOnly: StandardSchemaV1<Date, Date> = {
  '~standard': {
    version: 1,
    vendor: 'start-test',
    validate: (value) =>
      value instanceof Date ? { value } : { issues: [{ message: 'expected a Date' }] },
  },
};

describe('input that a toJSON changes on its way to storage', () => {
  it('is checked as stored, for saga input and signal payloads, and nothing is written', async () => {
    const opaque = defineSaga({ name: 'opaque', version: 1, input: dateOnly }).step('only', {
      ...fast,
      run: () => 1,
    });
    const waiter = defineSaga({ name: 'waiter', version: 1, input: z.object({}) })
      .step('first', { ...fast, run: () => 1 })
      .waitFor('when', { payload: dateOnly, timeoutMs: 60_000 });
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [opaque, waiter], logger: silent });
    const bad = await runtime
      .start(opaque, { id: 'dated', input: new Date() })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(SagaValidationError);
    expect((bad as SagaValidationError).issues).toEqual([
      {
        path: 'input',
        message:
          'expected a Date (checked as stored in JSON, where a Date becomes a string, and undefined null or, in an object, nothing)',
      },
    ]);
    expect(await runtime.getSaga('dated')).toBeNull();

    await runtime.start(waiter, { id: 'waits', input: {} });
    const { runtime: working } = await startSagas(db.pool, [waiter]);
    await settled(working, 'waits', ['waiting']);
    const refused = await runtime.signal('waits', 'when', new Date()).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(SagaValidationError);
    expect((refused as SagaValidationError).issues[0]!.path).toBe('payload');
    expect(await count("skiplock.saga_signals WHERE saga_id = 'waits'")).toBe(0);
    await runtime.close();
  });

  it('checks an undefined input or signal payload as the null it is stored as', async () => {
    // Schemas that take undefined but not null.
    const optional = defineSaga({
      name: 'optional-input',
      version: 1,
      input: z.object({ note: z.string() }).optional(),
    }).step('only', { ...fast, run: () => 1 });
    const bare = defineSaga({ name: 'bare-signal', version: 1, input: z.object({}) })
      .step('first', { ...fast, run: () => 1 })
      .waitFor('go', { payload: z.undefined(), timeoutMs: 60_000 });
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [optional, bare], logger: silent });
    // Before: started, then its first step died, its stored input null no longer its schema's.
    const bad = await runtime
      .start(optional, { id: 'no-input', input: undefined })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(SagaValidationError);
    expect((bad as SagaValidationError).issues[0]!.path).toBe('input');
    expect(await runtime.getSaga('no-input')).toBeNull();
    // Before: stored as null ahead of its wait, which then refused it and compensated the saga.
    await runtime.start(bare, { id: 'early', input: {} });
    const refused = await runtime.signal('early', 'go', undefined).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(SagaValidationError);
    expect((refused as SagaValidationError).issues[0]!.path).toBe('payload');
    expect(await count("skiplock.saga_signals WHERE saga_id = 'early'")).toBe(0);
    await runtime.close();
  });
});
