import { createScheduler, defineJob, defineSchedule } from '@skiplock/queue';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { useTestDatabase } from '../../../test/support/db.js';
import { runCli } from './run-cli.js';

const db = await useTestDatabase();
const env = { DATABASE_URL: db.url };
const job = defineJob({
  type: 'report.daily',
  queue: 'reports',
  payload: z.object({ at: z.string() }),
  handler: () => {},
});
const schedule = defineSchedule({
  name: 'daily-report',
  cron: '0 6 * * *',
  timezone: 'Europe/Paris',
  job,
  payload: (tick) => ({ at: tick.toISOString() }),
});
const scheduler = createScheduler({
  pool: db.pool,
  schedules: [schedule],
  logger: pino({ level: 'silent' }),
});

describe('skiplock schedules', () => {
  it('says there are none before any scheduler ran', async () => {
    const result = await runCli(['schedules', 'list'], env);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('no schedules');
  });

  it('lists, pauses and resumes a schedule, as the database shows', async () => {
    await scheduler.runOnce();
    const listed = await runCli(['schedules', 'list'], env);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(/daily-report\s+0 6 \* \* \*\s+Europe\/Paris\s+report\.daily/);
    expect(listed.stdout).toContain('active');
    for (const line of listed.stdout.split('\n')) expect(line.length).toBeLessThanOrEqual(80);

    const paused = await runCli(['schedules', 'pause', 'daily-report'], env);
    expect(paused.code, paused.stderr).toBe(0);
    expect(paused.stdout).toBe('schedule daily-report paused\n');
    const { rows } = await db.pool.query<{ paused: boolean }>(
      `SELECT paused FROM skiplock.schedules WHERE name = 'daily-report'`,
    );
    expect(rows[0]!.paused).toBe(true);
    expect((await scheduler.runOnce()).skipped).toEqual(['daily-report']);

    const json = await runCli(['schedules', 'list', '--json'], env);
    const { schedules } = JSON.parse(json.stdout) as { schedules: Record<string, unknown>[] };
    const { rows: seen } = await db.pool.query<{ seen_at: Date }>(
      `SELECT seen_at FROM skiplock.schedules WHERE name = 'daily-report'`,
    );
    expect(schedules).toEqual([
      expect.objectContaining({
        name: 'daily-report',
        paused: true,
        queue: 'reports',
        seenAt: seen[0]!.seen_at.toISOString(),
        state: 'paused',
      }),
    ]);

    const resumed = await runCli(['schedules', 'resume', 'daily-report', '--json'], env);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(JSON.parse(resumed.stdout)).toMatchObject({
      name: 'daily-report',
      paused: false,
      state: 'active',
    });
    expect((await scheduler.runOnce()).skipped).toEqual([]);

    // No scheduler seen running it for ten minutes (recorded an hour ago): flagged.
    await db.pool.query(
      `UPDATE skiplock.schedules
       SET seen_at = now() - interval '10 minutes', updated_at = now() - interval '1 hour'`,
    );
    const stale = await runCli(['schedules', 'list'], env);
    expect(stale.stdout).toMatch(/report\.daily \(reports\)\s+unseen/);
    for (const line of stale.stdout.split('\n')) expect(line.length).toBeLessThanOrEqual(80);
  });

  it('removes a schedule nothing runs, refuses an active one naming its state, and forces', async () => {
    await scheduler.runOnce();
    const active = await runCli(['schedules', 'remove', 'daily-report'], env);
    expect(active.code).toBe(1);
    expect(active.stderr).toMatch(
      /^skiplock schedules remove: schedule "daily-report" is active: a scheduler running it was seen, or it was paused or resumed, \d+ s ago; .*\(twice its on-time window\); --force removes it anyway\n$/,
    );
    const names = async () =>
      (await db.pool.query<{ name: string }>('SELECT name FROM skiplock.schedules')).rows.map(
        (r) => r.name,
      );
    expect(await names()).toEqual(['daily-report']);

    // No scheduler seen running it for ten minutes: removed, shown as it was.
    await db.pool.query(
      `UPDATE skiplock.schedules
       SET seen_at = now() - interval '10 minutes', updated_at = now() - interval '10 minutes'`,
    );
    const removed = await runCli(['schedules', 'remove', 'daily-report', '--json'], env);
    expect(removed.code, removed.stderr).toBe(0);
    expect(JSON.parse(removed.stdout)).toMatchObject({ name: 'daily-report', state: 'not_seen' });
    expect(await names()).toEqual([]);
    const again = await runCli(['schedules', 'remove', 'daily-report'], env);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('no schedule named "daily-report"');

    // Its scheduler records it again; --force removes it though it is active.
    await scheduler.runOnce();
    const forced = await runCli(['schedules', 'remove', 'daily-report', '--force'], env);
    expect(forced.code, forced.stderr).toBe(0);
    expect(forced.stdout).toBe('schedule daily-report removed\n');
    expect(await names()).toEqual([]);
    const bad = await runCli(['schedules', 'remove', 'daily-report', '--force=yes'], env);
    expect(bad.code).toBe(2);
  });

  it('exits 1 naming an unknown schedule, and 2 without a name', async () => {
    const unknown = await runCli(['schedules', 'pause', 'nope'], env);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toBe(
      'skiplock schedules pause: no schedule named "nope" (see `skiplock schedules list`)\n',
    );
    const missing = await runCli(['schedules', 'resume'], env);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('missing name');
  });
});
