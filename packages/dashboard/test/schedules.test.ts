import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createScheduler, defineJob, defineSchedule, listSchedules } from '@skiplock/queue';
import { createDashboard } from '../src/index.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { serve } from './support.js';

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
const post = (path: string, headers: Record<string, string> = operator) =>
  fetch(`${served.url}${path}`, { method: 'POST', redirect: 'manual', headers, body: '' });
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
      schedules: [schedule('nightly', '0 3 * * *'), schedule('orphan', '*/5 * * * *')],
      logger: silent,
    }).runOnce();
    // The orphan's scheduler was last seen ten minutes ago, recorded an hour ago: twice the
    // default on-time window (2 minutes) has passed.
    await db.pool.query(
      `UPDATE skiplock.schedules
       SET seen_at = now() - interval '10 minutes', updated_at = now() - interval '1 hour'
       WHERE name = 'orphan'`,
    );
    const page = await (await fetch(`${served.url}/schedules`)).text();
    expect(page).toContain('<code><span>0 3 * * *</span></code>');
    expect(page).toContain('report.build');
    expect(await states()).toEqual({ nightly: 'active', orphan: 'not-seen' });

    // Refused without the operator token; nothing changes.
    const refused = await post('/schedules/nightly/pause', {
      'content-type': 'application/x-www-form-urlencoded',
    });
    expect(refused.status).toBe(401);
    expect(await paused('nightly')).toBe(false);

    const pause = await post('/schedules/nightly/pause');
    expect(pause.status).toBe(303);
    expect(pause.headers.get('location')).toBe('/schedules?notice=schedule_paused');
    expect(await paused('nightly')).toBe(true);
    expect(await states()).toEqual({ nightly: 'paused', orphan: 'not-seen' });
    expect(logs.lines.find((l) => l.reason === 'dashboard_schedule_pause')).toMatchObject({
      operator: 'ada',
      schedule: 'nightly',
    });

    const resume = await post('/schedules/nightly/resume');
    expect(resume.headers.get('location')).toBe('/schedules?notice=schedule_resumed');
    expect(await paused('nightly')).toBe(false);
    expect(logs.reasons()).toContain('dashboard_schedule_resume');
  });

  it('answers 404 for a schedule no one has, or none can be named', async () => {
    for (const name of ['nope', 'not%20a%20name']) {
      const res = await post(`/schedules/${name}/pause`);
      expect(res.status, name).toBe(404);
      expect(await res.text()).toContain(`No schedule ${decodeURIComponent(name)}.`);
    }
    const wrong = await post('/schedules/nightly/stop');
    expect(wrong.status).toBe(404);
  });
});
