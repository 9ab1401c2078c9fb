import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  ConfigError,
  createClient,
  defaultBackoff,
  defineJob,
  InvalidPayloadError,
} from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import { quiet, testWorker } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

const ping = defineJob({
  type: 'input-checks-ping',
  payload: z.object({ n: z.number() }),
  handler: async () => {},
});

async function count(): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM skiplock.jobs WHERE job_type = 'input-checks-ping'`,
  );
  return rows[0]!.n;
}

describe('job ids', () => {
  it("refuses an id past bigint's range by name, as any other id that is no job's", async () => {
    const past = '9223372036854775808';
    for (const call of [
      () => client.getJob(past),
      () => client.cancelJob(past),
      () => client.retryJob(past),
      () => client.getJob('12a'),
    ]) {
      // Before: a raw DatabaseError (value out of range for type bigint) for the 19 digits.
      await expect(call()).rejects.toMatchObject({
        code: 'invalid_id',
        message: expect.stringMatching(/job id must be a positive integer string within bigint/),
      });
    }
    const largest = '9223372036854775807';
    expect(await client.getJob(largest)).toBeNull();
    expect(await client.cancelJob(largest)).toBe(false);
    expect(await client.retryJob(largest)).toBe(false);
  });
});

describe('enqueue options', () => {
  it('refuses runAt together with delayMs, naming both', async () => {
    const runAt = new Date(Date.now() + 60_000);
    await expect(client.enqueue(ping, { n: 1 }, { runAt, delayMs: 1_000 })).rejects.toThrow(
      ConfigError,
    );
    await expect(client.enqueue(ping, { n: 1 }, { runAt, delayMs: 1_000 })).rejects.toThrow(
      /runAt and delayMs/,
    );
    await expect(
      client.enqueueMany(ping, [{ payload: { n: 1 }, runAt, delayMs: 5 }]),
    ).rejects.toThrow(/runAt and delayMs/);
    expect(await count()).toBe(0);
  });
});

describe('bulk items', () => {
  it('refuses an item that is no object by its index, and enqueues none of the bulk', async () => {
    for (const [bad, what] of [
      [null, 'null'],
      [undefined, 'undefined'],
      [7, 'number'],
      ['x', 'string'],
    ] as const) {
      // Before: null and undefined failed with "Cannot convert undefined or null to object".
      await expect(
        client.enqueueMany(ping, [{ payload: { n: 1 } }, bad as never, { payload: { n: 3 } }]),
      ).rejects.toThrow(
        `enqueueMany: items[1] must be an object { payload, ...options }, not ${what}`,
      );
    }
    expect(await count()).toBe(0);
  });
});

describe('job definitions', () => {
  const base = { type: 'input-checks-define', payload: z.object({}), handler: async () => {} };

  it('refuses a nonRetryable that is not an array of classes, naming the entry', () => {
    class Refused extends Error {}
    expect(() => defineJob({ ...base, nonRetryable: ['ValidationError'] as never })).toThrow(
      'job type "input-checks-define": nonRetryable[0] must be an error class, not the string "ValidationError"',
    );
    expect(() => defineJob({ ...base, nonRetryable: [Refused, {}] as never })).toThrow(
      'nonRetryable[1] must be an error class, not a object',
    );
    expect(() => defineJob({ ...base, nonRetryable: [Refused, null] as never })).toThrow(
      'nonRetryable[1] must be an error class, not null',
    );
    expect(() => defineJob({ ...base, nonRetryable: Refused as never })).toThrow(
      'nonRetryable must be an array of error classes, not a function',
    );
    const kept = [Refused];
    const def = defineJob({ ...base, nonRetryable: kept });
    // A copy: an entry pushed later is not taken unchecked.
    kept.push({} as never);
    expect(def.nonRetryable).toEqual([Refused]);
  });

  it('refuses an onDead that is not a function', () => {
    expect(() => defineJob({ ...base, onDead: 'notify-ops' as never })).toThrow(
      'job type "input-checks-define": onDead must be a function (tx, job) => Promise<void>, not the string "notify-ops"',
    );
    expect(defineJob({ ...base, onDead: undefined }).onDead).toBeUndefined();
  });

  it('keeps the default of a backoff field given as undefined', () => {
    // Before: { maxMs: undefined } replaced the default, every delay was NaN, and the settle of a
    // failed attempt and the sweeper's pass failed on an interval out of range.
    const def = defineJob({ ...base, backoff: { baseMs: 500, maxMs: undefined } });
    expect(def.backoff).toEqual({ ...defaultBackoff, baseMs: 500 });
  });
});

const loose = defineJob({
  type: 'input-checks-ping',
  payload: z.any(),
  handler: async () => {},
});

/** `levels` arrays, each holding the next, around a 1. */
function nested(levels: number): unknown {
  let v: unknown = 1;
  for (let i = 0; i < levels; i++) v = [v];
  return v;
}

describe('payloads JSON cannot hold', () => {
  const circular: Record<string, unknown> = { a: 1 };
  circular['self'] = circular;
  it.each([
    [{ items: [1, 2, { name: 10n }] }, 'payload.items[2].name'],
    [circular, 'payload.self'],
    [{ items: [{}, {}, { name: 'a\u0000b' }] }, 'payload.items[2].name'],
    [{ s: 'x\ud800' }, 'payload.s'],
    [{ n: NaN }, 'payload.n'],
    [{ n: [Infinity] }, 'payload.n[0]'],
  ])('refuses %#, naming %s, before any SQL', async (payload, path) => {
    const error = await client.enqueue(loose, payload).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidPayloadError);
    expect((error as InvalidPayloadError).issues[0]!.path).toBe(path);
    expect(await count()).toBe(0);
  });

  it('accepts arrays and objects nested 1,000 levels deep, and refuses deeper by name', async () => {
    const { id, inserted } = await client.enqueue(loose, nested(1_000));
    expect(inserted).toBe(true);
    // 20,000 deep: a bare RangeError from the walk's recursion before the depth bound.
    for (const levels of [1_001, 20_000]) {
      const error = await client.enqueue(loose, nested(levels)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidPayloadError);
      const [issue] = (error as InvalidPayloadError).issues;
      expect(issue!.path).toBe(`payload${'[0]'.repeat(1_000)}`);
      expect(issue!.message).toBe('nests arrays and objects deeper than 1000 levels');
    }
    await db.pool.query(`DELETE FROM skiplock.jobs WHERE id = $1`, [id]);
  });
});

describe('schemas whose payloads cannot survive JSON', () => {
  it.each([
    [z.date(), 'payload', /a Date/],
    [z.object({ at: z.date() }), 'payload.at', /z\.coerce\.date\(\)/],
    [z.object({ n: z.array(z.bigint()) }), 'payload.n[]', /a BigInt/],
    [z.object({ tags: z.array(z.set(z.string())) }), 'payload.tags[]', /a Set/],
    [z.object({ m: z.map(z.string(), z.string()) }), 'payload.m', /a Map/],
    [z.tuple([z.string(), z.nan()]), 'payload[1]', /NaN/],
    [z.record(z.string(), z.literal(1n)), 'payload.*', /a BigInt/],
    [z.union([z.date(), z.bigint()]), 'payload', /a Date/],
    [z.object({ at: z.date() }).pipe(z.any()), 'payload.at', /a Date/],
  ])('defineJob refuses %#, naming %s', (payload, path, why) => {
    const define = () => defineJob({ type: 'input-checks-bad', payload, handler: () => {} });
    expect(define).toThrow(ConfigError);
    expect(define).toThrow(`job type "input-checks-bad": ${path}: the schema accepts only`);
    expect(define).toThrow(why);
  });

  it('accepts what JSON can carry: coercion, ISO strings, codecs, a union with a JSON option, recursion', () => {
    type Tree = { name: string; children: Tree[] };
    const tree: z.ZodType<Tree> = z.lazy(() =>
      z.object({ name: z.string(), children: z.array(tree) }),
    );
    const isoDate = z.codec(z.iso.datetime(), z.date(), {
      decode: (s) => new Date(s),
      encode: (d) => d.toISOString(),
    });
    for (const payload of [
      z.coerce.date(),
      z.object({ at: z.iso.datetime().pipe(z.coerce.date()), big: z.coerce.bigint() }),
      isoDate,
      z.union([z.date(), z.string()]),
      z.string().transform((s) => new Date(s)),
      tree,
      z
        .object({ d: z.date() })
        .catch({ d: new Date(0) })
        .or(z.null()),
      // Optional, nullable or defaulted: a producer may leave it out (a Date given for it is
      // refused at enqueue by the stored-form check).
      z.object({ at: z.date().optional(), n: z.bigint().nullable() }),
      z.object({ at: z.date().default(() => new Date()) }),
    ]) {
      expect(() =>
        defineJob({ type: 'input-checks-ok', payload, handler: () => {} }),
      ).not.toThrow();
    }
  });

  // A validator skiplock cannot look into: accepts Date instances only.
  const dateOnly: StandardSchemaV1<Date, Date> = {
    '~standard': {
      version: 1,
      vendor: 'input-checks',
      validate: (value) =>
        value instanceof Date ? { value } : { issues: [{ message: 'expected a Date' }] },
    },
  };

  it('checks at enqueue what the worker will parse when a toJSON changed the payload', async () => {
    const opaque = defineJob({ type: 'input-checks-ping', payload: dateOnly, handler: () => {} });
    const error = await client.enqueue(opaque, new Date()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidPayloadError);
    expect((error as InvalidPayloadError).issues).toEqual([
      {
        path: 'payload',
        message:
          'expected a Date (checked as stored in JSON, where a Date becomes a string, and undefined null or, in an object, nothing)',
      },
    ]);
    const many = await client
      .enqueueMany(opaque, [{ payload: new Date() }])
      .catch((e: unknown) => e);
    expect((many as InvalidPayloadError).issues[0]!.path).toBe('items[0].payload');
    expect(await count()).toBe(0);
  });

  it('checks the stored form when JSON nulls an undefined in an array', async () => {
    const tags = defineJob({
      type: 'input-checks-ping',
      payload: z.object({ tags: z.array(z.string().optional()) }),
      handler: () => {},
    });
    const error = await client.enqueue(tags, { tags: ['a', undefined] }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidPayloadError);
    expect((error as InvalidPayloadError).issues[0]!.path).toBe('payload.tags.1');
    // Dropped from an object, an undefined optional field is what the schema allows anyway.
    const optional = defineJob({
      type: 'input-checks-ping',
      payload: z.object({ note: z.string().optional() }),
      handler: () => {},
    });
    const { id } = await client.enqueue(optional, { note: undefined });
    await db.pool.query(`DELETE FROM skiplock.jobs WHERE id = $1`, [id]);
    expect(await count()).toBe(0);
  });

  it('stores a Date for a coercing schema, and the handler gets a Date back', async () => {
    const seen: unknown[] = [];
    const at = new Date('2026-03-29T01:30:00.000Z');
    const dated = defineJob({
      type: 'input-checks-ping',
      payload: z.object({ at: z.coerce.date() }),
      handler: (p) => {
        seen.push(p.at);
      },
    });
    const { id } = await client.enqueue(dated, { at });
    expect(await testWorker(db.pool, [dated]).runOnce()).toBe(1);
    expect(seen).toEqual([at]);
    const { rows } = await db.pool.query(`SELECT payload FROM skiplock.jobs WHERE id = $1`, [id]);
    expect(rows[0].payload).toEqual({ at: at.toISOString() });
    await db.pool.query(`DELETE FROM skiplock.jobs WHERE id = $1`, [id]);
  });

  it('refuses a Map or a Set in a payload, which JSON would store as {}', async () => {
    for (const [payload, path] of [
      [{ m: new Map([['a', 1]]) }, 'payload.m'],
      [[new Set([1])], 'payload[0]'],
    ] as const) {
      const error = await client.enqueue(loose, payload).catch((e: unknown) => e);
      expect((error as InvalidPayloadError).issues[0]).toMatchObject({ path });
    }
    expect(await count()).toBe(0);
  });
});
