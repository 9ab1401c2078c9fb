import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob, SkiplockError, type Job } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { quiet, testWorker } from './fixtures.js';
import { waitFor } from '../../../test/support/wait.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

const ping = defineJob({
  type: 'ping',
  payload: z.object({ n: z.number() }),
  handler: async () => {},
});

// Enough jobs that ids cross digit boundaries (9 -> 10, 99 -> 100): as text, '99' sorts after
// '241', which is how a text ordering hides jobs from keyset pages.
const enqueued = await client.enqueueMany(
  ping,
  Array.from({ length: 241 }, (_, n) => ({ payload: { n } })),
);
const ids = enqueued.map((r) => BigInt(r.id));

describe('listJobs', () => {
  it('puts the newest job first, by numeric id', async () => {
    const [first] = await client.listJobs({ limit: 1 });
    const newest = ids.reduce((a, b) => (b > a ? b : a));
    expect(first!.id).toBe(String(newest));
  });

  it('pages through every job exactly once, newest first, with the before-id cursor', async () => {
    expect(String(ids[0]).length).toBeLessThan(String(ids[ids.length - 1]).length);
    const seen: Job[] = [];
    let beforeId: string | undefined;
    for (let page = 0; page < 100; page++) {
      const jobs = await client.listJobs({ limit: 7, beforeId });
      seen.push(...jobs);
      if (jobs.length < 7) break;
      beforeId = jobs[jobs.length - 1]!.id;
    }
    const expected = [...ids].sort((a, b) => (a > b ? -1 : a < b ? 1 : 0)).map(String);
    expect(seen.map((j) => j.id)).toEqual(expected);
  });
});

describe('listJobs input', () => {
  it('refuses a bad limit, status or text naming it, never with a database error', async () => {
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{ limit: Number.NaN }, 'invalid_limit', /limit must be an integer .*NaN/],
      [{ limit: 2.5 }, 'invalid_limit', /limit must be an integer .*2\.5/],
      [{ limit: '10' }, 'invalid_limit', /limit must be an integer .*"10"/],
      [{ statuses: ['bogus'] }, 'invalid_filter', /statuses must be an array of .*"bogus"/],
      [{ statuses: 'dead' }, 'invalid_filter', /statuses must be an array of .*"dead"/],
      [{ statuses: [null] }, 'invalid_filter', /statuses must be an array of .*null/],
      [{ queue: 'a\u0000b' }, 'invalid_filter', /queue must be a string without NUL/],
      [{ jobType: 5 }, 'invalid_filter', /jobType must be a string .*5/],
    ];
    for (const [filter, code, message] of cases) {
      const error = await client.listJobs(filter as never).catch((e: unknown) => e);
      expect(error, JSON.stringify(filter)).toBeInstanceOf(SkiplockError);
      expect(error).toMatchObject({ code, message: expect.stringMatching(message) });
    }
    // Out-of-range limits are still clamped, and an empty status list means every status.
    expect(await client.listJobs({ limit: 5_000, statuses: [] })).toHaveLength(241);
    expect(await client.listJobs({ limit: 0, statuses: ['pending'] })).toHaveLength(1);
  });
});

describe('listJobs by worker', () => {
  it('finds the jobs a worker holds now, and those whose last attempt it ran', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const started: string[] = [];
    const held = defineJob({
      type: 'held-by-worker',
      queue: 'held',
      payload: z.object({}),
      handler: async (_p, ctx) => {
        started.push(ctx.job.id);
        await gate;
      },
    });
    const { id } = await client.enqueue(held, {});
    const a = testWorker(db.pool, [held], { workerId: 'host-a:1' });
    const running = a.runOnce();
    await waitFor(() => started.length === 1);
    const holding = await client.listJobs({ workerId: 'host-a:1', statuses: ['processing'] });
    expect(holding.map((j) => [j.id, j.lockedBy])).toEqual([[id, 'host-a:1']]);
    expect(await client.listJobs({ workerId: 'host-b:2' })).toEqual([]);
    release();
    await running;
    expect(await client.listJobs({ workerId: 'host-a:1', statuses: ['processing'] })).toEqual([]);
    const ran = await client.listJobs({ workerId: 'host-a:1' });
    expect(ran.map((j) => [j.id, j.status])).toEqual([[id, 'completed']]);
  });
});
