import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createScheduler, defineJob, defineSchedule, listSchedules } from '@skiplock/queue';
import { createDashboard } from '../src/index.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { rawHttp, serve } from './support.js';

const db = await useTestDatabase();
const silent = pino({ level: 'silent' });
const token = 'a-long-random-operator-token-for-schedules';
const logs = captureLogs();
const dashboard = createDashboard({ pool: db.pool, token, logger: logs.logger });
const served = await serve(dashboard);
afterAll(async () => {
  await served.close();
  await dashboard.close();
});

const report = defineJob({
  type: 'report.build',
  queue: 'reports',
  payload: z.object({ at: z.string() }),
  handler: () => {},
});
const schedule = (name: string, cron: string) =>
  defineSchedule({ name, cron, job: report, payload: (t) => ({ at: t.toISOString() }) });

const operator = {
  authorization: `Bearer ${token}`,
  'x-skiplock-operator': 'ada',
  'content-type': 'application/x-www-form-urlencoded',
};
const post = (path: string, schedule: string, headers: Record<string, string> = operator) =>
  fetch(`${served.url}${path}`, {
    method: 'POST',
    redirect: 'manual',
    headers,
    body: new URLSearchParams({ schedule }).toString(),
  });
const paused = async (name: string) =>
  (await listSchedules(db.pool)).find((s) => s.name === name)?.paused;
/** The state badge of each schedule row, by name. */
async function states(): Promise<Record<string, string>> {
  const page = await (await fetch(`${served.url}/schedules`)).text();
  return Object.fromEntries(
    [...page.matchAll(/data-schedule="([^"]+)"[\s\S]*?data-state="([a-z-]+)"/g)].map((m) => [
      m[1]!,
      m[2]!,
    ]),
  );
}

describe('dashboard schedules', () => {
  it('says there are none before a scheduler ran', async () => {
    const res = await fetch(`${served.url}/schedules`);
    expect(res.status).toBe(200);
    const page = await res.text();
    expect(page).toContain('data-testid="no-schedules"');
    expect(page).toContain('aria-current="page"');
  });

  it('lists each schedule with its state, flags one no scheduler was seen running, and pauses and resumes', async () => {
    await createScheduler({
      pool: db.pool,
      schedules: [
        schedule('nightly', '0 3 * * *'),
        schedule('orphan', '*/5 * * * *'),
        schedule('slow', '0 * * * *'),
        schedule('legacy', '0 4 * * *'),
        schedule('..', '0 5 * * *'),
      ],
      logger: silent,
    }).runOnce();
    // Recorded an hour ago. The orphan's scheduler was last seen ten minutes ago: past twice the
    // default on-time window (2 minutes). The slow one's, fifteen minutes ago, runs with a
    // 10-minute window: inside twice it. The legacy one was recorded by a version that does not
    // mark schedules seen.
    await db.pool.query(
      `UPDATE skiplock.schedules SET updated_at = now() - interval '1 hour',
         seen_at = now() - CASE name WHEN 'orphan' THEN interval '10 minutes'
                                     WHEN 'slow' THEN interval '15 minutes'
                                     ELSE interval '5 seconds' END,
         on_time_ms = CASE name WHEN 'slow' THEN 600000 ELSE on_time_ms END`,
    );
    await db.pool.query(
      `UPDATE skiplock.schedules SET seen_at = NULL, seen_for = NULL WHERE name = 'legacy'`,
    );
    const page = await (await fetch(`${served.url}/schedules`)).text();
    expect(page).toContain('<code><span>0 3 * * *</span></code>');
    expect(page).toContain('report.build');
    expect(await states()).toEqual({
      '..': 'active',
      legacy: 'unknown',
      nightly: 'active',
      orphan: 'not-seen',
      slow: 'active',
    });

    // Refused without the operator token; nothing changes.
    const refused = await post('/schedules/pause', 'nightly', {
      'content-type': 'application/x-www-form-urlencoded',
    });
    expect(refused.status).toBe(401);
    expect(await paused('nightly')).toBe(false);

    const pause = await post('/schedules/pause', 'nightly');
    expect(pause.status).toBe(303);
    expect(pause.headers.get('location')).toMatch(
      /^\/schedules\?notice=schedule_paused&t=\d+&sig=/,
    );
    expect(await paused('nightly')).toBe(true);
    expect(await states()).toMatchObject({ nightly: 'paused', orphan: 'not-seen' });
    expect(logs.lines.find((l) => l.reason === 'dashboard_schedule_pause')).toMatchObject({
      operator: 'ada',
      schedule: 'nightly',
    });
    // A resume counts as seen: the schedule is not flagged when it comes back.
    await post('/schedules/pause', 'orphan');
    const resume = await post('/schedules/resume', 'orphan');
    expect(resume.headers.get('location')).toMatch(
      /^\/schedules\?notice=schedule_resumed&t=\d+&sig=/,
    );
    expect(await paused('orphan')).toBe(false);
    expect(await states()).toMatchObject({ orphan: 'active' });
    expect(logs.reasons()).toContain('dashboard_schedule_resume');
  });

  it("pauses from the page's own form, signed in, a schedule whose name is dots too", async () => {
    const { port, send } = rawHttp(served, token);
    const host = { host: `127.0.0.1:${port}` };
    const form = {
      ...host,
      origin: `http://127.0.0.1:${port}`,
      'content-type': 'application/x-www-form-urlencoded',
    };
    const signIn = await send(
      'POST',
      '/sign-in',
      form,
      new URLSearchParams({ operator: 'bob', token, next: '/schedules' }).toString(),
    );
    expect(signIn.status).toBe(303);
    const session = { cookie: signIn.cookie };
    const shown = await send('GET', '/schedules', { ...host, ...session });
    // The button's form for the schedule named "..": its action and fields, as a browser sends.
    const formHtml = /<form[^>]*action="([^"]+)"[\s\S]*?<\/form>/g;
    const forms = [...shown.text.matchAll(formHtml)].filter((m) =>
      m[0].includes('name="schedule" value=".."'),
    );
    expect(forms).toHaveLength(1);
    const action = forms[0]![1]!;
    const csrf = /name="_csrf" value="([^"]+)"/.exec(forms[0]![0])?.[1];
    expect(action).toBe('/schedules/pause');
    const done = await send(
      'POST',
      action,
      { ...form, ...session },
      new URLSearchParams({ _csrf: csrf!, schedule: '..' }).toString(),
    );
    expect(done.status).toBe(303);
    expect(await paused('..')).toBe(true);
    const forged = await send(
      'POST',
      '/schedules/resume',
      { ...form, ...session },
      new URLSearchParams({ _csrf: 'forged', schedule: '..' }).toString(),
    );
    expect(forged.status).toBe(403);
    expect(await paused('..')).toBe(true);
  });

  it('removes a schedule no scheduler runs, offered on its row only, and refuses one a scheduler runs', async () => {
    await createScheduler({
      pool: db.pool,
      schedules: [schedule('retired', '0 6 * * *'), schedule('kept', '0 7 * * *')],
      logger: silent,
    }).runOnce();
    await db.pool.query(
      `UPDATE skiplock.schedules
       SET seen_at = now() - interval '10 minutes', updated_at = now() - interval '10 minutes'
       WHERE name = 'retired'`,
    );
    // The signed-in page offers Remove on the not-seen row alone: not on an active, a paused
    // (the earlier tests paused nightly) or an unknown (legacy) one.
    expect(await states()).toMatchObject({
      retired: 'not-seen',
      kept: 'active',
      nightly: 'paused',
      legacy: 'unknown',
    });
    const { port, send } = rawHttp(served, token);
    const signIn = await send(
      'POST',
      '/sign-in',
      {
        host: `127.0.0.1:${port}`,
        origin: `http://127.0.0.1:${port}`,
        'content-type': 'application/x-www-form-urlencoded',
      },
      new URLSearchParams({ operator: 'bob', token, next: '/schedules' }).toString(),
    );
    const shown = await send('GET', '/schedules', {
      host: `127.0.0.1:${port}`,
      cookie: signIn.cookie,
    });
    const removeForms = [
      ...shown.text.matchAll(/<form[^>]*action="\/schedules\/remove"[\s\S]*?<\/form>/g),
    ].map((m) => /name="schedule" value="([^"]+)"/.exec(m[0])?.[1]);
    expect(removeForms).toEqual(['retired']);

    // Active: refused, 409, with why; it stays.
    const refused = await post('/schedules/remove', 'kept');
    expect(refused.status).toBe(409);
    expect(await refused.text()).toContain('schedule &quot;kept&quot; is active');
    const removed = await post('/schedules/remove', 'retired');
    expect(removed.status).toBe(303);
    expect(removed.headers.get('location')).toMatch(
      /^\/schedules\?notice=schedule_removed&t=\d+&sig=/,
    );
    const names = (await listSchedules(db.pool)).map((s) => s.name);
    expect(names).toContain('kept');
    expect(names).not.toContain('retired');
    expect(logs.lines.find((l) => l.reason === 'dashboard_schedule_remove')).toMatchObject({
      operator: 'ada',
      schedule: 'retired',
    });
    expect((await post('/schedules/remove', 'retired')).status).toBe(404);
  });

  it('refuses a pause with 409, saying why, while a stalled pass holds the schedule', async () => {
    await createScheduler({
      pool: db.pool,
      schedules: [schedule('held-by-pass', '0 8 * * *')],
      logger: silent,
    }).runOnce();
    const other = await db.pool.connect();
    try {
      await other.query('BEGIN');
      await other.query(`SELECT 1 FROM skiplock.schedules WHERE name = 'held-by-pass' FOR UPDATE`);
      // Before: the request waited as long as the holder did.
      const res = await post('/schedules/pause', 'held-by-pass');
      expect(res.status).toBe(409);
      expect(await res.text()).toContain('Not paused: schedule &quot;held-by-pass&quot; was held');
    } finally {
      await other.query('ROLLBACK');
      other.release();
    }
    expect(await paused('held-by-pass')).toBe(false);
  });

  it('answers 404 for a schedule no one has, or none can be named, and 400 for none named', async () => {
    for (const name of ['nope', 'not a name']) {
      const res = await post('/schedules/pause', name);
      expect(res.status, name).toBe(404);
      expect(await res.text()).toContain(`No schedule ${name}.`);
    }
    expect((await post('/schedules/pause', '')).status).toBe(400);
    expect((await post('/schedules/stop', 'nightly')).status).toBe(404);
  });

  it('says so, instead of failing, on a database whose schedules table is older or missing', async () => {
    await db.pool.query('ALTER TABLE skiplock.schedules DROP COLUMN seen_for');
    for (const drop of [null, 'DROP TABLE skiplock.schedules']) {
      if (drop) await db.pool.query(drop);
      const res = await fetch(`${served.url}/schedules`);
      expect(res.status).toBe(200);
      expect(await res.text()).toContain('data-testid="schedules-missing"');
      const pause = await post('/schedules/pause', 'nightly');
      expect(pause.status).toBe(409);
      expect(await pause.text()).toContain(
        'schedules table is missing or older than this dashboard',
      );
    }
    expect(logs.reasons()).not.toContain('dashboard_error');
  });
});
