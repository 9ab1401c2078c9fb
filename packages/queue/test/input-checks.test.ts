import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError, createClient, defineJob } from '../src/index.js';
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
