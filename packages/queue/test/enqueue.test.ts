import { drizzle } from 'drizzle-orm/node-postgres';
import { sql } from 'drizzle-orm';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createClient,
  defineJob,
  InvalidPayloadError,
  PayloadTooLargeError,
  SkiplockError,
} from '../src/index.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { quiet } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet, maxPayloadBytes: 1_024 });

const charge = defineJob({
  type: 'charge',
  queue: 'billing',
  priority: 3,
  payload: z.object({ invoiceId: z.string(), amountCents: z.number().int().positive() }),
  handler: async () => {},
});

async function count(where = 'true', pool: pg.Pool = db.pool): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM skiplock.jobs WHERE ${where}`,
  );
  return rows[0]!.n;
}

describe('enqueue', () => {
  it('stores a pending job with the definition defaults and options', async () => {
    const { id, inserted } = await client.enqueue(
      charge,
      { invoiceId: 'i1', amountCents: 500 },
      { maxAttempts: 9 },
    );
    expect(inserted).toBe(true);
    const job = await client.getJob(id);
    expect(job).toMatchObject({
      id,
      queue: 'billing',
      jobType: 'charge',
      status: 'pending',
      priority: 3,
      maxAttempts: 9,
      attempts: 0,
      payload: { invoiceId: 'i1', amountCents: 500 },
    });
  });

  it('enqueues a bulk of jobs in one statement, results in input order', async () => {
    const counted = new pg.Pool({ connectionString: db.url, max: 1 });
    let statements = 0;
    const original = counted.query.bind(counted);
    counted.query = ((...args: Parameters<typeof original>) => {
      statements += 1;
      return original(...args);
    }) as typeof counted.query;
    const bulk = createClient({ pool: counted, logger: quiet });
    const items = Array.from({ length: 500 }, (_, i) => ({
      payload: { invoiceId: `bulk-${i}`, amountCents: i + 1 },
    }));
    const results = await bulk.enqueueMany(charge, items);
    expect(statements).toBe(1);
    expect(results).toHaveLength(500);
    expect(results.every((r) => r.inserted)).toBe(true);
    const { rows } = await db.pool.query<{ id: string; invoice: string }>(
      `SELECT id::text, payload->>'invoiceId' AS invoice FROM skiplock.jobs WHERE id = ANY($1::bigint[])`,
      [results.map((r) => r.id)],
    );
    const byId = new Map(rows.map((r) => [r.id, r.invoice]));
    results.forEach((r, i) => expect(byId.get(r.id)).toBe(`bulk-${i}`));
    await counted.end();
  });

  it('numbers a bulk in input order, so its jobs are claimed in the order given', async () => {
    const results = await client.enqueueMany(
      charge,
      Array.from({ length: 50 }, (_, i) => ({
        payload: { invoiceId: `fifo-${i}`, amountCents: 1 },
      })),
    );
    const ids = results.map((r) => BigInt(r.id));
    expect(ids.every((id, i) => i === 0 || id > ids[i - 1]!)).toBe(true);
  });

  it('bulk items with options of their own but no key: one statement, options per item', async () => {
    const counted = db.newPool(1);
    let statements = 0;
    const original = counted.query.bind(counted);
    counted.query = ((...args: Parameters<typeof original>) => {
      statements += 1;
      return original(...args);
    }) as typeof counted.query;
    const bulk = createClient({ pool: counted, logger: quiet });
    const results = await bulk.enqueueMany(charge, [
      { payload: { invoiceId: 'opt-0', amountCents: 1 } },
      { payload: { invoiceId: 'opt-1', amountCents: 1 }, priority: 9, queue: 'urgent' },
      { payload: { invoiceId: 'opt-2', amountCents: 1 }, maxAttempts: 1, delayMs: 60_000 },
    ]);
    expect(statements).toBe(1);
    expect(results.every((r) => r.inserted)).toBe(true);
    const jobs = await Promise.all(results.map((r) => client.getJob(r.id)));
    expect(jobs.map((j) => [j?.payload, j?.queue, j?.priority, j?.maxAttempts])).toEqual([
      [{ invoiceId: 'opt-0', amountCents: 1 }, 'billing', 3, 5],
      [{ invoiceId: 'opt-1', amountCents: 1 }, 'urgent', 9, 5],
      [{ invoiceId: 'opt-2', amountCents: 1 }, 'billing', 3, 1],
    ]);
    expect(jobs[2]!.runAt.getTime()).toBeGreaterThan(jobs[0]!.runAt.getTime() + 55_000);
  });

  it('a keyed bulk reports jobs that already held a key, in input order', async () => {
    const held = await client.enqueue(
      charge,
      { invoiceId: 'held', amountCents: 1 },
      { idempotencyKey: 'bulk-held' },
    );
    const results = await client.enqueueMany(charge, [
      { payload: { invoiceId: 'new', amountCents: 1 }, idempotencyKey: 'bulk-new' },
      { payload: { invoiceId: 'held', amountCents: 1 }, idempotencyKey: 'bulk-held' },
      { payload: { invoiceId: 'none', amountCents: 1 } },
    ]);
    expect(results.map((r) => r.inserted)).toEqual([true, false, true]);
    expect(results[1]!.id).toBe(held.id);
    expect(new Set(results.map((r) => r.id)).size).toBe(3);
  });

  it('a bulk in the caller transaction rolls back with it, keyed or not', async () => {
    const before = await count();
    const conn = await db.pool.connect();
    try {
      await conn.query('BEGIN');
      await client.enqueueMany(charge, [{ payload: { invoiceId: 'rb-1', amountCents: 1 } }], {
        tx: conn,
      });
      await client.enqueueMany(
        charge,
        [{ payload: { invoiceId: 'rb-2', amountCents: 1 }, idempotencyKey: 'bulk-rb' }],
        { tx: conn },
      );
      expect(await count(`payload->>'invoiceId' LIKE 'rb-%'`)).toBe(0);
      await conn.query('ROLLBACK');
    } finally {
      conn.release();
    }
    expect(await count()).toBe(before);
    const again = await client.enqueueMany(charge, [
      { payload: { invoiceId: 'rb-2', amountCents: 1 }, idempotencyKey: 'bulk-rb' },
    ]);
    expect(again[0]!.inserted).toBe(true);
  });

  it('is idempotent per queue: the second enqueue reports the existing id', async () => {
    const first = await client.enqueue(
      charge,
      { invoiceId: 'k', amountCents: 1 },
      { idempotencyKey: 'charge:k' },
    );
    const second = await client.enqueue(
      charge,
      { invoiceId: 'k', amountCents: 1 },
      { idempotencyKey: 'charge:k' },
    );
    expect(first.inserted).toBe(true);
    expect(second).toEqual({ id: first.id, inserted: false });
    const otherQueue = await client.enqueue(
      charge,
      { invoiceId: 'k', amountCents: 1 },
      { idempotencyKey: 'charge:k', queue: 'other' },
    );
    expect(otherQueue.inserted).toBe(true);
    expect(otherQueue.id).not.toBe(first.id);
  });

  it('deduplicates keys inside one bulk statement', async () => {
    const results = await client.enqueueMany(charge, [
      { payload: { invoiceId: 'd', amountCents: 1 }, idempotencyKey: 'dup-in-batch' },
      { payload: { invoiceId: 'd', amountCents: 1 }, idempotencyKey: 'dup-in-batch' },
      { payload: { invoiceId: 'e', amountCents: 1 } },
    ]);
    expect(results[0]!.inserted).toBe(true);
    expect(results[1]).toEqual({ id: results[0]!.id, inserted: false });
    expect(results[2]!.inserted).toBe(true);
  });

  it('creates one job under concurrent duplicate enqueues from separate connections', async () => {
    const pools = Array.from({ length: 12 }, () => db.newPool(1));
    const clients = pools.map((pool) => createClient({ pool, logger: quiet }));
    for (let round = 0; round < 5; round++) {
      const key = `race-${round}`;
      const results = await Promise.all(
        clients.map((c) =>
          c.enqueue(charge, { invoiceId: key, amountCents: 1 }, { idempotencyKey: key }),
        ),
      );
      expect(results.filter((r) => r.inserted)).toHaveLength(1);
      expect(new Set(results.map((r) => r.id)).size).toBe(1);
      expect(await count(`idempotency_key = '${key}'`)).toBe(1);
    }
  });

  it('concurrent duplicates inside open transactions resolve to the committed job', async () => {
    const a = await db.pool.connect();
    const b = await db.pool.connect();
    try {
      await a.query('BEGIN');
      await b.query('BEGIN');
      const first = await client.enqueue(
        charge,
        { invoiceId: 'tx', amountCents: 1 },
        { idempotencyKey: 'tx-race', tx: a },
      );
      // b's insert waits on a's uncommitted row; once a commits, b sees a conflict.
      const pending = client.enqueue(
        charge,
        { invoiceId: 'tx', amountCents: 1 },
        { idempotencyKey: 'tx-race', tx: b },
      );
      await a.query('COMMIT');
      const second = await pending;
      await b.query('COMMIT');
      expect(first.inserted).toBe(true);
      expect(second).toEqual({ id: first.id, inserted: false });
    } finally {
      a.release();
      b.release();
    }
  });

  it('joins a pg client transaction: rollback leaves no job, commit keeps it', async () => {
    const conn = await db.pool.connect();
    try {
      await conn.query('BEGIN');
      const { id } = await client.enqueue(
        charge,
        { invoiceId: 'rb', amountCents: 1 },
        { tx: conn },
      );
      expect(await client.getJob(id, { tx: conn })).not.toBeNull();
      await conn.query('ROLLBACK');
      expect(await client.getJob(id)).toBeNull();

      await conn.query('BEGIN');
      const kept = await client.enqueue(charge, { invoiceId: 'ok', amountCents: 1 }, { tx: conn });
      await conn.query('COMMIT');
      expect((await client.getJob(kept.id))?.status).toBe('pending');
    } finally {
      conn.release();
    }
  });

  it('joins a drizzle transaction: a thrown error rolls the job back with the business write', async () => {
    const orm = drizzle(db.pool);
    await orm.execute(sql`CREATE TABLE IF NOT EXISTS public.invoices (id text PRIMARY KEY)`);
    let jobId = '';
    await expect(
      orm.transaction(async (tx) => {
        await tx.execute(sql`INSERT INTO public.invoices VALUES ('inv-rb')`);
        jobId = (await client.enqueue(charge, { invoiceId: 'inv-rb', amountCents: 9 }, { tx })).id;
        throw new Error('business rule failed');
      }),
    ).rejects.toThrow('business rule failed');
    expect(jobId).not.toBe('');
    expect(await client.getJob(jobId)).toBeNull();
    expect(
      (await db.pool.query(`SELECT 1 FROM public.invoices WHERE id = 'inv-rb'`)).rowCount,
    ).toBe(0);

    await orm.transaction(async (tx) => {
      await tx.execute(sql`INSERT INTO public.invoices VALUES ('inv-ok')`);
      jobId = (await client.enqueue(charge, { invoiceId: 'inv-ok', amountCents: 9 }, { tx })).id;
    });
    expect((await client.getJob(jobId))?.status).toBe('pending');
  });

  it('refuses an invalid payload at run time, naming the field, and logs the reason', async () => {
    const logs = captureLogs();
    const strict = createClient({ pool: db.pool, logger: logs.logger });
    const before = await count();
    const bad = { invoiceId: 'x', amountCents: 'ten' } as unknown as {
      invoiceId: string;
      amountCents: number;
    };
    const error = await strict.enqueue(charge, bad).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidPayloadError);
    expect((error as InvalidPayloadError).code).toBe('invalid_payload');
    expect((error as Error).message).toContain('payload.amountCents');
    expect(logs.reasons()).toContain('invalid_payload');
    expect(JSON.stringify(logs.lines)).not.toContain('ten');

    const bulkError = await strict
      .enqueueMany(charge, [{ payload: { invoiceId: 'a', amountCents: 1 } }, { payload: bad }])
      .catch((e: unknown) => e);
    expect((bulkError as Error).message).toContain('items[1].payload.amountCents');
    expect(await count()).toBe(before);
  });

  it('refuses an oversized payload with a clear error and inserts nothing', async () => {
    const blob = defineJob({
      type: 'blob',
      payload: z.object({ data: z.string() }),
      handler: async () => {},
    });
    const before = await count();
    const error = await client.enqueue(blob, { data: 'x'.repeat(2_000) }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PayloadTooLargeError);
    expect((error as Error).message).toMatch(/blob.*over the limit of 1024 bytes/);
    expect(await count()).toBe(before);
  });

  it('rejects bad enqueue options naming the option', async () => {
    await expect(
      client.enqueue(charge, { invoiceId: 'o', amountCents: 1 }, { priority: 1.5 }),
    ).rejects.toThrow(/priority/);
    await expect(
      client.enqueue(charge, { invoiceId: 'o', amountCents: 1 }, { bogus: true } as never),
    ).rejects.toThrow(/bogus/);
  });

  it('schedules delayed jobs in the database clock', async () => {
    const { id } = await client.enqueue(
      charge,
      { invoiceId: 'later', amountCents: 1 },
      { delayMs: 60_000 },
    );
    const { rows } = await db.pool.query<{ ahead_ms: number }>(
      `SELECT (extract(epoch FROM run_at - now()) * 1000)::float8 AS ahead_ms FROM skiplock.jobs WHERE id = $1`,
      [id],
    );
    expect(rows[0]!.ahead_ms).toBeGreaterThan(55_000);
    expect(rows[0]!.ahead_ms).toBeLessThanOrEqual(60_000);
  });

  it('cancels a pending job, and only a pending one', async () => {
    const { id } = await client.enqueue(charge, { invoiceId: 'c', amountCents: 1 });
    expect(await client.cancelJob(id)).toBe(true);
    expect((await client.getJob(id))?.status).toBe('cancelled');
    expect(await client.cancelJob(id)).toBe(false);
    expect(await client.cancelJob('999999999')).toBe(false);
    await expect(client.cancelJob('not-a-number')).rejects.toBeInstanceOf(SkiplockError);
  });
});
