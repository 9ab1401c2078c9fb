import { createClient, defineJob } from '@skiplock/queue';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { useTestDatabase } from '../../../test/support/db.js';
import { runCli } from './run-cli.js';

const db = await useTestDatabase();
const env = { DATABASE_URL: db.url };
const client = createClient({ pool: db.pool, logger: pino({ level: 'silent' }) });

const ping = defineJob({
  type: 'ping',
  payload: z.object({ n: z.number() }),
  handler: () => {},
});

// More jobs than one page, with ids crossing digit boundaries: ordered as text, '99' would
// come before '241' and a --before-id page would skip every job in between.
const ids = (
  await client.enqueueMany(
    ping,
    Array.from({ length: 241 }, (_, n) => ({ payload: { n } })),
  )
).map((r) => BigInt(r.id));

type Listing = { jobs: { id: string }[]; nextBeforeId: string | null };

describe('skiplock jobs list paging', () => {
  it('shows every job exactly once, newest first, following --before-id', async () => {
    expect(String(ids[0]).length).toBeLessThan(String(ids[ids.length - 1]).length);
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 10; page++) {
      const args = ['jobs', 'list', '--limit', '100', '--json'];
      if (cursor) args.push('--before-id', cursor);
      const result = await runCli(args, env);
      expect(result.code, result.stderr).toBe(0);
      const listing = JSON.parse(result.stdout) as Listing;
      seen.push(...listing.jobs.map((j) => j.id));
      cursor = listing.nextBeforeId;
      if (!cursor) break;
    }
    const newestFirst = [...ids].sort((a, b) => (a > b ? -1 : a < b ? 1 : 0)).map(String);
    expect(seen).toEqual(newestFirst);
  });

  it('puts the newest job on the first row of the table', async () => {
    const result = await runCli(['jobs', 'list', '--limit', '3'], env);
    expect(result.code, result.stderr).toBe(0);
    const rows = result.stdout.trimEnd().split('\n').slice(1, 4);
    const newest = ids.reduce((a, b) => (b > a ? b : a));
    expect(rows.map((l) => l.trim().split(/\s+/)[0])).toEqual(
      [newest, newest - 1n, newest - 2n].map(String),
    );
    expect(result.stdout).toContain(`more: skiplock jobs list --before-id ${newest - 2n} ...`);
  });
});
