import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError, createClient, defineJob, InvalidPayloadError } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { quiet } from './fixtures.js';

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

const loose = defineJob({
  type: 'input-checks-ping',
  payload: z.any(),
  handler: async () => {},
});

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
});
