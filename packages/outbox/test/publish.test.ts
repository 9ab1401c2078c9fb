import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError } from '@skiplock/queue';
import { withTransaction } from '@skiplock/queue/engine';
import {
  defineOutbox,
  InvalidMessageError,
  outboxCounts,
  publish,
  publishMany,
} from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';

const db = await useTestDatabase();

const outbox = defineOutbox({
  topics: {
    'invoice.paid': z.object({ invoiceId: z.string(), amountCents: z.number().int().positive() }),
    'invoice.voided': z.object({ invoiceId: z.string() }),
  },
  maxPayloadBytes: 2_000,
});

async function rows(where = 'true') {
  const { rows } = await db.pool.query<{
    id: string;
    topic: string;
    key: string | null;
    payload: unknown;
    headers: unknown;
    status: string;
  }>(
    `SELECT id::text, topic, key, payload, headers, status::text FROM skiplock.outbox_messages WHERE ${where} ORDER BY outbox_messages.id`,
  );
  return rows;
}

describe('publish', () => {
  it('writes in the caller transaction: committed with it, gone with its rollback', async () => {
    const kept = await withTransaction(db.pool, async (tx) => {
      await tx.query('SELECT 1');
      return outbox.publish(tx, {
        topic: 'invoice.paid',
        key: 'inv-1',
        payload: { invoiceId: 'inv-1', amountCents: 500 },
        headers: { 'trace-id': 'abc' },
      });
    });
    let dropped = '';
    await expect(
      withTransaction(db.pool, async (tx) => {
        dropped = await outbox.publish(tx, {
          topic: 'invoice.voided',
          key: 'inv-2',
          payload: { invoiceId: 'inv-2' },
        });
        throw new Error('domain write failed');
      }),
    ).rejects.toThrow('domain write failed');
    expect(dropped).toMatch(/^\d+$/);
    const written = await rows(`id IN (${kept}, ${dropped})`);
    expect(written).toEqual([
      {
        id: kept,
        topic: 'invoice.paid',
        key: 'inv-1',
        payload: { invoiceId: 'inv-1', amountCents: 500 },
        headers: { 'trace-id': 'abc' },
        status: 'pending',
      },
    ]);
  });

  it('joins a drizzle transaction', async () => {
    const orm = drizzle(db.pool);
    await orm.execute(sql`CREATE TABLE IF NOT EXISTS public.invoices (id text PRIMARY KEY)`);
    const id = await orm.transaction(async (tx) => {
      await tx.execute(sql`INSERT INTO public.invoices VALUES ('inv-d')`);
      return outbox.publish(tx, {
        topic: 'invoice.voided',
        key: 'inv-d',
        payload: { invoiceId: 'inv-d' },
      });
    });
    expect((await rows(`id = ${id}`))[0]?.topic).toBe('invoice.voided');
    await expect(
      orm.transaction(async (tx) => {
        await tx.execute(sql`INSERT INTO public.invoices VALUES ('inv-e')`);
        await publish(tx, { topic: 'audit', payload: { invoice: 'inv-e' } });
        tx.rollback();
      }),
    ).rejects.toThrow();
    expect(await rows(`payload->>'invoice' = 'inv-e'`)).toEqual([]);
  });

  it('writes a bulk publish with one statement, ids rising in the given order', async () => {
    const messages = Array.from({ length: 250 }, (_, i) => ({
      topic: 'bulk.test',
      key: `k${i % 7}`,
      payload: { n: i },
    }));
    const ids = await publishMany(db.pool, messages);
    expect(ids).toHaveLength(250);
    const stored = await rows(`topic = 'bulk.test'`);
    expect(stored.map((r) => r.id)).toEqual(ids);
    expect(stored.map((r) => (r.payload as { n: number }).n)).toEqual(
      messages.map((m) => m.payload.n),
    );
    expect(await publishMany(db.pool, [])).toEqual([]);
  });

  it('refuses invalid messages, naming every problem, and writes none of the call', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const error = await outbox
        .publishMany(client, [
          { topic: 'invoice.paid', key: 'ok', payload: { invoiceId: 'a', amountCents: 1 } },
          { topic: 'invoice.paid', key: 'k', payload: { invoiceId: 'b', amountCents: -5 } },
          // @ts-expect-error: not a topic of this outbox
          { topic: 'invoice.payed', payload: {} },
        ])
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidMessageError);
      const message = (error as Error).message;
      expect(message).toContain('messages[1].payload.amountCents');
      expect(message).toContain('"invoice.payed" is not a topic of this outbox');
      // The transaction was not touched: the caller goes on and commits its own write.
      await client.query(`SELECT 1`);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    expect(await rows(`payload->>'invoiceId' IN ('a', 'b')`)).toEqual([]);
  });

  it.each([
    ['message.topic: must be a string of 1 to 255 characters', { topic: '', payload: 1 }],
    ['message.topic: may hold letters', { topic: 'a b', payload: 1 }],
    ['message.topic: may hold letters', { topic: 'orders.*', payload: 1 }],
    ['message.key: must be null or a string', { topic: 't', key: '', payload: 1 }],
    ['message.payload: is required', { topic: 't', payload: undefined }],
    ['message.payload.n', { topic: 't', payload: { n: 10n } }],
    [
      'message.headers.bad name: is not a valid header name',
      { topic: 't', payload: 1, headers: { 'bad name': 'x' } },
    ],
    [
      'message.headers.h: must be a single-line string',
      { topic: 't', payload: 1, headers: { h: 'a\r\nb' } },
    ],
    [
      'message.headers.h: must be a single-line string',
      { topic: 't', payload: 1, headers: { h: 5 } },
    ],
    ['message.topic: may hold letters', { topic: 'a..b', payload: 1 }],
    ['message.topic: may hold letters', { topic: 'a.', payload: 1 }],
    ['message.key: holds a NUL character', { topic: 't', key: 'a\u0000b', payload: 1 }],
    [
      'message.headers.h: holds a NUL character',
      { topic: 't', payload: 1, headers: { h: '\ud800' } },
    ],
    // Sent as a NATS header, a key with CR or LF could never go; fetch refuses any control
    // character in a header value; brokers and HTTP trim a space at either end.
    ['message.key: holds a control character', { topic: 't', key: 'a\rb', payload: 1 }],
    ['message.key: holds a control character', { topic: 't', key: 'a\u0001b', payload: 1 }],
    ['message.key: begins or ends with a space', { topic: 't', key: ' k', payload: 1 }],
    [
      'message.headers.h: holds a control character',
      { topic: 't', payload: 1, headers: { h: 'a\u0001b' } },
    ],
    [
      'message.headers.h: holds a control character',
      { topic: 't', payload: 1, headers: { h: 'a\u007fb' } },
    ],
    [
      'message.headers.h: begins or ends with a space or tab',
      { topic: 't', payload: 1, headers: { h: 'v ' } },
    ],
  ] as const)('refuses a message: %s', async (expected, message) => {
    const error = await publish(db.pool, message as never).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidMessageError);
    expect((error as Error).message).toContain(expected);
  });

  it('refuses a payload nested deeper than 1,000 levels by name, not with a RangeError', async () => {
    let payload: unknown = 1;
    for (let i = 0; i < 20_000; i++) payload = [payload];
    const error = await publish(db.pool, { topic: 't', payload }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidMessageError);
    expect((error as Error).message).toContain('nests arrays and objects deeper than 1000 levels');
  });

  it('refuses a payload over maxPayloadBytes, saying its size', async () => {
    const error = await outbox
      .publish(db.pool, { topic: 'invoice.voided', payload: { invoiceId: 'x'.repeat(3_000) } })
      .catch((e: unknown) => e);
    expect((error as Error).message).toMatch(
      /message\.payload: is \d+ bytes as JSON, over maxPayloadBytes 2000/,
    );
  });

  it('refuses bad options when the outbox is defined, naming each', () => {
    const topics = { 'invoice.voided': z.object({ invoiceId: z.string() }) };
    const refused: [Record<string, unknown>, string][] = [
      // Before: NaN compared false with every size, so no payload was too big to write.
      [
        { topics, maxPayloadBytes: NaN },
        'maxPayloadBytes must be a whole number of bytes above 0 (or Infinity), got NaN',
      ],
      [
        { topics, maxPayloadBytes: 0 },
        'maxPayloadBytes must be a whole number of bytes above 0 (or Infinity), got 0',
      ],
      [
        { topics, maxPayloadBytes: 1.5 },
        'maxPayloadBytes must be a whole number of bytes above 0 (or Infinity), got 1.5',
      ],
      // Before: these failed only at publish, with "Cannot read properties of undefined".
      [{}, 'topics must be an object of a Standard Schema per topic name'],
      [{ topics: [] }, 'topics must be an object'],
      [{ topics: { 'a.b': { parse: () => 1 } } }, 'topics["a.b"] must be a Standard Schema'],
      [{ topics, strictTopics: 'no' }, 'strictTopics must be true or false'],
    ];
    for (const [options, what] of refused) {
      const make = () => defineOutbox(options as never);
      expect(make).toThrow(ConfigError);
      expect(make).toThrow(`defineOutbox: ${what}`);
    }
    // No limit, and a topic listed without a schema (its payloads unchecked), stay allowed.
    expect(() => defineOutbox({ topics, maxPayloadBytes: Infinity })).not.toThrow();
    expect(() => defineOutbox({ topics: { 'a.b': undefined } } as never)).not.toThrow();
    expect(() => defineOutbox({ topics: { 'a.b': null } } as never)).not.toThrow();
  });

  it('keeps the topics it was defined with', async () => {
    const topics: Record<string, z.ZodType> = { 'kept.a': z.object({ n: z.number() }) };
    const kept = defineOutbox({ topics });
    topics['kept.b'] = z.object({});
    const error = await kept
      .publish(db.pool, { topic: 'kept.b', payload: {} } as never)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidMessageError);
    expect(await rows(`topic LIKE 'kept.%'`)).toEqual([]);
  });

  it('counts the headers in maxPayloadBytes and refuses more than 8 KiB of them', async () => {
    // Found by an audit: both went dead at delivery (NATS counts headers in its max_payload;
    // AMQP encodes at most 64 KiB of them, and HTTP servers accept 8 to 16 KiB in all).
    const both = await outbox
      .publish(db.pool, {
        topic: 'invoice.voided',
        payload: { invoiceId: 'x'.repeat(1_500) },
        headers: { trace: 'y'.repeat(800) },
      })
      .catch((e: unknown) => e);
    expect((both as Error).message).toMatch(
      /message\.payload: is \d+ bytes as JSON and the headers 805, over maxPayloadBytes 2000/,
    );
    const headers = Object.fromEntries(
      Array.from({ length: 3 }, (_, i) => [`h${i}`, 'z'.repeat(4_000)]),
    );
    const many = await publish(db.pool, { topic: 't', payload: 1, headers }).catch(
      (e: unknown) => e,
    );
    expect(many).toBeInstanceOf(InvalidMessageError);
    expect((many as Error).message).toContain(
      'message.headers: are 12006 bytes (names and values), more than 8192',
    );
    expect(await rows(`topic = 't' AND payload = '1'`)).toEqual([]);
  });

  it('stores what the schema outputs', async () => {
    const trimmed = defineOutbox({
      topics: { 'user.renamed': z.object({ name: z.string().trim() }) },
    });
    const id = await trimmed.publish(db.pool, {
      topic: 'user.renamed',
      payload: { name: '  Ada ' },
    });
    expect((await rows(`id = ${id}`))[0]?.payload).toEqual({ name: 'Ada' });
  });

  it('notifies relays when the transaction commits, not before and not on rollback', async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const seen: string[] = [];
    listener.on('notification', (n) => seen.push(n.channel));
    await listener.query('LISTEN skiplock_outbox');
    try {
      const client = await db.pool.connect();
      try {
        await client.query('BEGIN');
        await publish(client, { topic: 'n.test', payload: 1 });
        await publish(client, { topic: 'n.test', payload: 2 });
        await listener.query('SELECT 1');
        expect(seen).toEqual([]);
        await client.query('ROLLBACK');
        await listener.query('SELECT 1');
        expect(seen).toEqual([]);
        await client.query('BEGIN');
        await publish(client, { topic: 'n.test', payload: 3 });
        await publish(client, { topic: 'n.test', payload: 4 });
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      const deadline = Date.now() + 5_000;
      while (seen.length === 0 && Date.now() < deadline) await listener.query('SELECT 1');
      // Two publishes in one transaction: PostgreSQL folds their notifications into one.
      expect(seen).toEqual(['skiplock_outbox']);
    } finally {
      await listener.end();
    }
    expect((await outboxCounts(db.pool)).pending).toBeGreaterThan(0);
  });
});
