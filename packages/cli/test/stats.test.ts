import { createClient, defineJob } from '@skiplock/queue';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { useTestDatabase } from '../../../test/support/db.js';
import { runCli } from './run-cli.js';

const db = await useTestDatabase();
const env = { DATABASE_URL: db.url };
const client = createClient({ pool: db.pool, logger: pino({ level: 'silent' }) });
const job = defineJob({ type: 'noop', payload: z.object({ n: z.number() }), handler: () => {} });

const enqueue = (n: number, queue: string) =>
  client.enqueueMany(
    job,
    Array.from({ length: n }, (_, i) => ({ payload: { n: i }, queue })),
  );
const [mail, media] = [await enqueue(6, 'mail'), await enqueue(2, 'media')];
// keyed: 1 waiting for a slot of its concurrency key for 3 minutes, 1 waiting and not yet due.
const keyed = await client.enqueueMany(
  job,
  [0, 1].map((n) => ({ payload: { n }, queue: 'keyed', concurrencyKey: 'k', concurrencyLimit: 1 })),
);
const set = (ids: { id: string }[], assignments: string) =>
  db.pool.query(`UPDATE skiplock.jobs SET ${assignments} WHERE id = ANY($1::bigint[])`, [
    ids.map((r) => r.id),
  ]);
// mail: 2 pending (the oldest runnable for 5 minutes), 2 processing (1 lease expired), 2 dead
// (1 an hour and more ago); media: 1 pending in the future, 1 completed.
await set([mail[0]!], "run_at = now() - interval '5 minutes'");
await set(
  mail.slice(2, 4),
  "status = 'processing', attempts = 1, locked_by = 'w', locked_at = now()",
);
await set([mail[2]!], "lease_expires_at = now() - interval '10 seconds'");
await set([mail[3]!], "lease_expires_at = now() + interval '30 seconds'");
await set(mail.slice(4, 6), "status = 'dead', attempts = 5");
await set([mail[5]!], "updated_at = now() - interval '2 hours'");
await set([media[0]!], "run_at = now() + interval '1 hour'");
await set([media[1]!], "status = 'completed', completed_at = now()");
await set([keyed[0]!], "run_at = now() - interval '3 minutes'");
await set([keyed[1]!], "run_at = now() + interval '1 hour'");

describe('skiplock stats', () => {
  it('reports depth, oldest waiting age, expired leases and recent dead jobs as JSON', async () => {
    const result = await runCli(['stats', '--json'], env);
    expect(result.code, result.stderr).toBe(0);
    const { stats } = JSON.parse(result.stdout) as { stats: Record<string, unknown>[] };
    const byKey = Object.fromEntries(stats.map((s) => [`${s.queue}/${s.status}`, s]));
    expect(Object.keys(byKey).sort()).toEqual([
      'keyed/waiting',
      'mail/dead',
      'mail/pending',
      'mail/processing',
      'media/completed',
      'media/pending',
    ]);
    for (const s of stats) {
      expect(Object.keys(s)).toEqual([
        'queue',
        'status',
        'count',
        'oldestRunnableAgeMs',
        'expiredLeases',
        'deadLastHour',
      ]);
    }
    expect(byKey['mail/pending']).toMatchObject({ count: 2, expiredLeases: 0, deadLastHour: 0 });
    const age = byKey['mail/pending']!.oldestRunnableAgeMs as number;
    expect(age).toBeGreaterThanOrEqual(5 * 60_000);
    // Bounded above only loosely: the test may run a while after seeding on a slow machine.
    expect(age).toBeLessThan(10 * 60_000);
    expect(byKey['mail/processing']).toMatchObject({
      count: 2,
      oldestRunnableAgeMs: null,
      expiredLeases: 1,
    });
    expect(byKey['mail/dead']).toMatchObject({ count: 2, deadLastHour: 1 });
    // A job scheduled for later is not waiting yet.
    expect(byKey['media/pending']).toMatchObject({ count: 1, oldestRunnableAgeMs: null });
    // How long the oldest due job has waited for a slot of its key (before: no age for these).
    expect(byKey['keyed/waiting']).toMatchObject({ count: 2 });
    const waited = byKey['keyed/waiting']!.oldestRunnableAgeMs as number;
    expect(waited).toBeGreaterThanOrEqual(3 * 60_000);
    expect(waited).toBeLessThan(8 * 60_000);
  });

  it('prints an aligned table', async () => {
    const result = await runCli(['stats'], env);
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(
      /^QUEUE\s+STATUS\s+DEPTH\s+OLDEST WAITING\s+EXPIRED LEASES\s+DEAD LAST HOUR$/,
    );
    // Queues by name, statuses in lifecycle order.
    expect(
      lines.slice(1).map((l) =>
        l
          .split(/\s{2,}/)
          .slice(0, 2)
          .join('/'),
      ),
    ).toEqual([
      'keyed/waiting',
      'mail/pending',
      'mail/processing',
      'mail/dead',
      'media/pending',
      'media/completed',
    ]);
    expect(lines).toContainEqual(expect.stringMatching(/^keyed\s+waiting\s+2\s+[3-7]m\s+-\s+-$/));
    expect(lines).toContainEqual(expect.stringMatching(/^mail\s+pending\s+2\s+[5-9]m\s+-\s+-$/));
    expect(lines).toContainEqual(expect.stringMatching(/^mail\s+processing\s+2\s+-\s+1\s+-$/));
    expect(lines).toContainEqual(expect.stringMatching(/^mail\s+dead\s+2\s+-\s+-\s+1$/));
    // Right-aligned numbers end where their header ends.
    const depthEnd = lines[0]!.indexOf('DEPTH') + 'DEPTH'.length;
    for (const line of lines.slice(1)) expect(line[depthEnd - 1]).toMatch(/[0-9]/);
  });
});
