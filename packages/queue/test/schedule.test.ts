import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import {
  ConfigError,
  createClient,
  createScheduler,
  defineJob,
  defineSchedule,
  listSchedules,
  pauseSchedule,
  removeSchedule,
  resumeSchedule,
  SkiplockError,
} from '../src/index.js';
import { waitFor } from '../../../test/support/wait.js';
import { quiet, testWorker } from './fixtures.js';

const db = await useTestDatabase();

const at = (iso: string) => new Date(iso);
const minutes = (base: Date, n: number) => new Date(base.getTime() + n * 60_000);

/** Ticks enqueued for a schedule, by their keys, oldest first. */
async function ticksOf(name: string): Promise<string[]> {
  const { rows } = await db.pool.query<{ key: string }>(
    `SELECT idempotency_key AS key FROM skiplock.jobs
     WHERE idempotency_key LIKE $1 ORDER BY idempotency_key`,
    [`schedule:${name}:%`],
  );
  return rows.map((r) => r.key.slice(`schedule:${name}:`.length));
}

function job(queue: string) {
  return defineJob({
    type: `tick.${queue}`,
    queue,
    payload: z.object({ at: z.string() }),
    handler: async () => {},
  });
}

/** No scheduler seen running `name` for ten minutes, nor the row changed: it reads not_seen. */
const markUnseen = (name: string) =>
  db.pool.query(
    `UPDATE skiplock.schedules
     SET seen_at = now() - interval '10 minutes', updated_at = now() - interval '10 minutes'
     WHERE name = $1`,
    [name],
  );

/** A schedule of `j` that fires every minute. */
const everyMinute = (name: string, j: ReturnType<typeof job>) =>
  defineSchedule({ name, cron: '* * * * *', job: j, payload: (t) => ({ at: t.toISOString() }) });

describe('defineSchedule', () => {
  const j = job('define');
  it.each([
    [{ cron: '61 * * * *' }, /schedule "s": .*minute/],
    [{ cron: '' }, /schedule "s": cron/],
    [{ cron: '* * * * *', timezone: 'Mars/Base' }, /schedule "s": .*Mars\/Base/],
    [{ cron: '* * * * *', catchUp: 'all' }, /schedule "s" catchUp/],
    [{ cron: '* * * * *', catchUp: { withinMs: 0 } }, /schedule "s" catchUp: withinMs/],
    [{ cron: '0 0 31 2 *' }, /schedule "s": cron "0 0 31 2 \*" never fires/],
    [{ cron: '0 0 0 1 1 * 2020' }, /schedule "s": cron "0 0 0 1 1 \* 2020" has 7 fields/],
    [{ cron: '* *' }, /schedule "s": cron "\* \*" has 2 fields/],
    [{ cron: '* * * * *', timezone: '' }, /schedule "s": timezone: give an IANA/],
    [{ cron: '* * * * *', timezone: 5 }, /schedule "s": timezone: give an IANA/],
  ])('refuses %j, naming what is wrong', (bad, message) => {
    expect(() =>
      defineSchedule({ name: 's', job: j, payload: { at: '' }, ...(bad as { cron: string }) }),
    ).toThrow(ConfigError);
    expect(() =>
      defineSchedule({ name: 's', job: j, payload: { at: '' }, ...(bad as { cron: string }) }),
    ).toThrow(message);
  });

  it('refuses a job whose singleton mode cannot take a tick key (replace, throttle)', () => {
    const singleton = (singletonMode: 'keep' | 'replace' | 'throttle') =>
      defineJob({
        type: `single.${singletonMode}`,
        payload: z.object({ at: z.string() }),
        // No key for ticks' payloads (at ''), as a per-user key is null without a user.
        singletonKey: (p) => (p.at === '' ? null : 'only'),
        singletonMode,
        ...(singletonMode === 'throttle' ? { singletonWindowMs: 60_000 } : {}),
        handler: async () => {},
      });
    for (const mode of ['replace', 'throttle'] as const) {
      // Before: accepted, and then every pass failed with a ConfigError (schedule_failed).
      for (const payload of [{ at: 'x' }, (t: Date) => ({ at: t.toISOString() })]) {
        expect(() =>
          defineSchedule({ name: 's', cron: '* * * * *', job: singleton(mode), payload }),
        ).toThrow(`job "single.${mode}" has singletonMode "${mode}" and a singleton key`);
      }
      // A key of null for the schedule's payload: no singleton, so the tick's key is fine.
      expect(
        defineSchedule({ name: 's', cron: '* * * * *', job: singleton(mode), payload: { at: '' } })
          .name,
      ).toBe('s');
    }
    expect(
      defineSchedule({ name: 's', cron: '* * * * *', job: singleton('keep'), payload: { at: 'x' } })
        .name,
    ).toBe('s');
  });

  it('runs a replace-mode job whose key is null for its ticks', async () => {
    const j = defineJob({
      type: 'tick.debounced',
      queue: 'debounced',
      payload: z.object({ at: z.string(), user: z.string().optional() }),
      singletonKey: (p) => p.user ?? null,
      singletonMode: 'replace',
      handler: async () => {},
    });
    const s = defineSchedule({
      name: 'debounced',
      cron: '* * * * *',
      job: j,
      payload: (tick) => ({ at: tick.toISOString() }),
    });
    const scheduler = createScheduler({ pool: db.pool, schedules: [s], logger: quiet });
    const start = at('2026-06-01T10:00:30Z');
    await scheduler.runOnce({ now: start });
    const pass = await scheduler.runOnce({ now: minutes(start, 1) });
    expect(pass.failed).toEqual([]);
    expect(await ticksOf('debounced')).toEqual(['2026-06-01T10:01:00.000Z']);
  });

  it('refuses a name that is not a queue-style name, and a schedule listed twice', () => {
    expect(() => defineSchedule({ name: 'a b', cron: '* * * * *', job: j, payload: {} })).toThrow(
      /schedule name/,
    );
    const s = defineSchedule({ name: 'twice', cron: '* * * * *', job: j, payload: { at: '' } });
    expect(() => createScheduler({ pool: db.pool, schedules: [s, s], logger: quiet })).toThrow(
      /"twice" is listed twice/,
    );
  });
});

describe('scheduler', () => {
  it('enqueues every tick once, with its tick in the key and the payload built from it', async () => {
    const j = job('every-minute');
    const s = defineSchedule({
      name: 'every-minute',
      cron: '* * * * *',
      job: j,
      payload: (tick) => ({ at: tick.toISOString() }),
    });
    const scheduler = createScheduler({ pool: db.pool, schedules: [s], logger: quiet });
    const t0 = at('2026-01-01T00:00:30Z');
    // The first pass records the schedule; ticks before it existed are not enqueued.
    expect((await scheduler.runOnce({ now: t0 })).enqueued).toEqual({ 'every-minute': 0 });
    for (let n = 1; n <= 10; n++) await scheduler.runOnce({ now: minutes(t0, n / 2) });
    // A pass at the same time again finds nothing new.
    expect((await scheduler.runOnce({ now: minutes(t0, 5) })).enqueued).toEqual({
      'every-minute': 0,
    });
    const keys = await ticksOf('every-minute');
    expect(keys).toEqual(
      [1, 2, 3, 4, 5].map((m) => minutes(at('2026-01-01T00:00:00Z'), m).toISOString()),
    );
    const { rows } = await db.pool.query<{ payload: { at: string } }>(
      `SELECT payload FROM skiplock.jobs WHERE idempotency_key = $1`,
      [`schedule:every-minute:${keys[0]}`],
    );
    expect(rows[0]!.payload).toEqual({ at: keys[0] });
  });

  it('after downtime: skip enqueues none of the late ticks, latest one, withinMs those in the window', async () => {
    const logs = captureLogs();
    const policies = {
      skip: 'skip' as const,
      latest: 'latest' as const,
      window: { withinMs: 5 * 60_000 },
    };
    const t0 = at('2026-02-01T10:00:30Z');
    for (const [name, catchUp] of Object.entries(policies)) {
      const s = defineSchedule({
        name: `down-${name}`,
        cron: '* * * * *',
        job: job(`down-${name}`),
        payload: (tick) => ({ at: tick.toISOString() }),
        catchUp,
      });
      const scheduler = createScheduler({ pool: db.pool, schedules: [s], logger: logs.logger });
      await scheduler.runOnce({ now: t0 });
      // Twenty minutes without a scheduler, then one pass 30 s after the 20th tick.
      await scheduler.runOnce({ now: minutes(t0, 20) });
    }
    const tick = (m: number) => minutes(at('2026-02-01T10:00:00Z'), m).toISOString();
    // The tick 30 s ago is on time (within a minute); the 19 before it were missed.
    expect(await ticksOf('down-skip')).toEqual([tick(20)]);
    expect(await ticksOf('down-latest')).toEqual([tick(20)]);
    expect(await ticksOf('down-window')).toEqual([16, 17, 18, 19, 20].map(tick));
    const missed = logs.lines.filter((l) => l.reason === 'schedule_ticks_missed');
    expect(missed.map((l) => l.schedule).sort()).toEqual(['down-skip', 'down-window']);
  });

  it('latest catches up one tick however late, and nothing twice', async () => {
    const s = defineSchedule({
      name: 'hourly-latest',
      cron: '0 * * * *',
      job: job('hourly-latest'),
      payload: (tick) => ({ at: tick.toISOString() }),
      catchUp: 'latest',
    });
    const scheduler = createScheduler({ pool: db.pool, schedules: [s], logger: quiet });
    await scheduler.runOnce({ now: at('2026-02-02T00:10:00Z') });
    await scheduler.runOnce({ now: at('2026-02-02T05:59:00Z') });
    await scheduler.runOnce({ now: at('2026-02-02T06:20:00Z') });
    await scheduler.runOnce({ now: at('2026-02-02T06:40:00Z') });
    expect(await ticksOf('hourly-latest')).toEqual([
      '2026-02-02T05:00:00.000Z',
      '2026-02-02T06:00:00.000Z',
    ]);
  });

  it("enqueues a catch-up's ticks in bulks its client accepts", async () => {
    // A client whose bulks hold 4 jobs, and 11 late ticks in the catch-up window.
    const client = createClient({ pool: db.pool, logger: quiet, maxBulkSize: 4 });
    const s = defineSchedule({
      name: 'small-bulks',
      cron: '* * * * *',
      job: job('small-bulks'),
      payload: (tick) => ({ at: tick.toISOString() }),
      catchUp: { withinMs: 3_600_000 },
    });
    const scheduler = createScheduler({ pool: db.pool, client, schedules: [s], logger: quiet });
    const start = at('2026-05-01T10:00:30Z');
    await scheduler.runOnce({ now: start });
    const pass = await scheduler.runOnce({ now: minutes(start, 11) });
    // Before: bulk_too_large on every pass, and no tick after the first.
    expect(pass.failed).toEqual([]);
    expect(pass.enqueued).toEqual({ 'small-bulks': 11 });
    expect(await ticksOf('small-bulks')).toHaveLength(11);
    // A client without maxBulkSize (an older copy of the package): one bulk, no tick lost.
    const older = { ...client, maxBulkSize: undefined } as unknown as typeof client;
    const s2 = defineSchedule({ ...s, name: 'no-bulk-size', job: job('no-bulk-size') });
    const olderScheduler = createScheduler({
      pool: db.pool,
      client: older,
      schedules: [s2],
      logger: quiet,
    });
    await olderScheduler.runOnce({ now: start });
    expect((await olderScheduler.runOnce({ now: minutes(start, 3) })).enqueued).toEqual({
      'no-bulk-size': 3,
    });
  });

  it('follows daylight saving: a daily time that does not exist runs once, one that repeats runs once', async () => {
    const s = defineSchedule({
      name: 'berlin-0230',
      cron: '30 2 * * *',
      timezone: 'Europe/Berlin',
      job: job('berlin-0230'),
      payload: (tick) => ({ at: tick.toISOString() }),
      catchUp: { withinMs: 2 * 3_600_000 },
    });
    const scheduler = createScheduler({ pool: db.pool, schedules: [s], logger: quiet });
    for (const [from, days] of [
      ['2026-03-27T12:00:00Z', 4],
      ['2026-10-23T12:00:00Z', 4],
    ] as const) {
      const start = at(from);
      for (let hour = 0; hour <= days * 24; hour++) {
        await scheduler.runOnce({ now: minutes(start, hour * 60) });
      }
    }
    expect(await ticksOf('berlin-0230')).toEqual([
      '2026-03-28T01:30:00.000Z', // 02:30 CET
      '2026-03-29T01:00:00.000Z', // 02:30 does not exist: 03:00 CEST, the first valid time
      '2026-03-30T00:30:00.000Z', // 02:30 CEST
      '2026-03-31T00:30:00.000Z',
      '2026-10-24T00:30:00.000Z', // 02:30 CEST
      '2026-10-25T00:30:00.000Z', // 02:30 happens twice; only its first occurrence (CEST) runs
      '2026-10-26T01:30:00.000Z', // 02:30 CET
      '2026-10-27T01:30:00.000Z',
    ]);
  });

  it('follows daylight saving for lists and ranges as for one time, and skips what an interval cannot hit', async () => {
    const define = (name: string, cron: string) =>
      defineSchedule({
        name,
        cron,
        timezone: 'Europe/Berlin',
        job: job(name),
        payload: (tick) => ({ at: tick.toISOString() }),
        catchUp: { withinMs: 2 * 3_600_000 },
      });
    const scheduler = createScheduler({
      pool: db.pool,
      schedules: [define('berlin-list', '15,45 2 * * *'), define('berlin-step', '*/30 2 * * *')],
      logger: quiet,
    });
    for (const from of ['2026-03-28T12:00:00Z', '2026-10-24T12:00:00Z']) {
      const start = at(from);
      for (let hour = 0; hour <= 24; hour++) {
        await scheduler.runOnce({ now: minutes(start, hour * 60) });
      }
    }
    expect(await ticksOf('berlin-list')).toEqual([
      // 02:15 and 02:45 do not exist: one run at 03:00 CEST. Before: none that night.
      '2026-03-29T01:00:00.000Z',
      '2026-10-25T00:15:00.000Z', // 02:15 and 02:45 CEST; their repeats (CET) do not run
      '2026-10-25T00:45:00.000Z',
    ]);
    expect(await ticksOf('berlin-step')).toEqual([
      // An interval: its times that do not exist are skipped, its repeated ones run twice.
      '2026-10-25T00:00:00.000Z',
      '2026-10-25T00:30:00.000Z',
      '2026-10-25T01:00:00.000Z',
      '2026-10-25T01:30:00.000Z',
    ]);
  });

  it('pauses and resumes, lists schedules, and keeps the operator’s pause when redefined', async () => {
    const j = job('pausable');
    const define = (cron: string) =>
      defineSchedule({ name: 'pausable', cron, job: j, payload: (t) => ({ at: t.toISOString() }) });
    const scheduler = createScheduler({
      pool: db.pool,
      schedules: [define('* * * * *')],
      logger: quiet,
    });
    const t0 = at('2026-03-01T00:00:30Z');
    await scheduler.runOnce({ now: t0 });
    expect((await pauseSchedule(db.pool, 'pausable'))?.paused).toBe(true);
    expect(await pauseSchedule(db.pool, 'no-such-schedule')).toBeNull();
    const paused = await scheduler.runOnce({ now: minutes(t0, 1) });
    expect(paused.skipped).toEqual(['pausable']);
    expect(await ticksOf('pausable')).toEqual([]);

    // Another process with a new cron for it: the definition changes, the pause stays.
    const other = createScheduler({
      pool: db.pool,
      schedules: [define('*/2 * * * *')],
      logger: quiet,
    });
    await other.runOnce({ now: minutes(t0, 2) });
    const listed = (await listSchedules(db.pool)).find((s) => s.name === 'pausable');
    expect(listed).toMatchObject({ cron: '*/2 * * * *', paused: true, queue: 'pausable' });

    expect((await resumeSchedule(db.pool, 'pausable'))?.paused).toBe(false);
    await other.runOnce({ now: minutes(t0, 4) });
    // Resumed under 'skip': the tick 30 s ago runs; the one missed while paused does not.
    expect(await ticksOf('pausable')).toEqual(['2026-03-01T00:04:00.000Z']);
  });

  it('pause and resume refuse a name that is not a string, and find no schedule of a name none can have', async () => {
    for (const set of [pauseSchedule, resumeSchedule]) {
      // Before: undefined was a syntax error at RETURNING, from PostgreSQL.
      for (const bad of [undefined, null, 5]) {
        const error = await set(db.pool, bad as unknown as string).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(SkiplockError);
        expect(error).toMatchObject({
          code: 'invalid_name',
          message: expect.stringMatching(/^schedule name must be a string, got /),
        });
      }
      // Before: a NUL failed the statement.
      expect(await set(db.pool, 'a\u0000b')).toBeNull();
      expect(await set(db.pool, '')).toBeNull();
    }
  });

  it('removes only a schedule nothing runs, unless forced, and a scheduler that still defines a removed one records it again from then', async () => {
    const logs = captureLogs();
    const j = job('retired');
    const scheduler = createScheduler({
      pool: db.pool,
      schedules: [everyMinute('retired', j)],
      logger: logs.logger,
    });
    const t0 = at('2026-04-01T00:00:30Z');
    await scheduler.runOnce({ now: t0 });
    const row = async () => (await listSchedules(db.pool)).find((s) => s.name === 'retired');
    const refusal = async (force?: boolean) =>
      removeSchedule(db.pool, 'retired', force === undefined ? {} : { force }).catch(
        (e: unknown) => e,
      );

    // Active by its scheduler's mark (recorded long ago, seen 5 s ago): it would record it again.
    await db.pool.query(`UPDATE skiplock.schedules
                         SET seen_at = now() - interval '5 seconds',
                             updated_at = now() - interval '10 minutes'
                         WHERE name = 'retired'`);
    expect(await refusal()).toMatchObject({
      code: 'schedule_in_use',
      message: expect.stringMatching(
        /^schedule "retired" is active: a scheduler running it was seen, or it was paused or resumed, \d+ s ago; a scheduler that runs it would record it again at its next pass\. Stop the processes that define it and wait until it reads not_seen \(twice its on-time window\)$/,
      ),
    });
    // Paused: not marked seen while paused, so what defines it cannot be told.
    await pauseSchedule(db.pool, 'retired');
    await markUnseen('retired');
    expect(await refusal()).toMatchObject({
      code: 'schedule_in_use',
      message: expect.stringMatching(/^schedule "retired" is paused: /),
    });
    await resumeSchedule(db.pool, 'retired');
    // Never marked (a scheduler before 0018 may run it).
    await db.pool.query(`UPDATE skiplock.schedules SET seen_for = NULL WHERE name = 'retired'`);
    expect(await refusal(false)).toMatchObject({
      code: 'schedule_in_use',
      message: expect.stringMatching(/^schedule "retired" was never marked seen: /),
    });
    expect(await row()).toBeDefined();

    // Nothing seen running it for ten minutes: removed, and reported as it was.
    await scheduler.runOnce({ now: minutes(t0, 1) });
    await markUnseen('retired');
    const removed = await removeSchedule(db.pool, 'retired');
    expect(removed).toMatchObject({ name: 'retired', cron: '* * * * *', paused: false });
    expect(removed?.sinceSeenMs).toBeGreaterThan(9 * 60_000);
    expect(await row()).toBeUndefined();
    expect(await removeSchedule(db.pool, 'retired')).toBeNull();

    // A scheduler that still defines it (it had stalled) records it again, from its pass:
    // before, it skipped the missing row until it restarted, and the schedule never fired again.
    const back = await scheduler.runOnce({ now: minutes(t0, 5) });
    expect(back.enqueued).toEqual({ retired: 0 });
    expect(logs.reasons()).toContain('schedule_recorded_again');
    expect(await row()).toMatchObject({ paused: false, lastTickAt: minutes(t0, 5) });
    await scheduler.runOnce({ now: minutes(t0, 6) });
    // The minute-1 tick, then none of those while it was gone; the minute-6 tick.
    expect(await ticksOf('retired')).toEqual([
      '2026-04-01T00:01:00.000Z',
      '2026-04-01T00:06:00.000Z',
    ]);

    // Forced, a paused one goes too, and its scheduler records it again, unpaused.
    await pauseSchedule(db.pool, 'retired');
    expect(await removeSchedule(db.pool, 'retired', { force: true })).toMatchObject({
      paused: true,
    });
    await scheduler.runOnce({ now: minutes(t0, 7) });
    expect(await row()).toMatchObject({ paused: false, lastTickAt: minutes(t0, 7) });
  });

  it('a pass leaves a paused schedule unlocked, and does not wait for one another scheduler holds', async () => {
    const j = job('held');
    const define = (name: string) => everyMinute(name, j);
    const scheduler = createScheduler({
      pool: db.newPool(2),
      schedules: [define('held'), define('held-paused'), define('held-other')],
      logger: quiet,
    });
    const t0 = at('2026-05-01T00:00:30Z');
    await scheduler.runOnce({ now: t0 });
    await pauseSchedule(db.pool, 'held-paused');
    // Not even row-locked: a lock took a transaction id and WAL per paused schedule per pass.
    await scheduler.runOnce({ now: minutes(t0, 1) });
    const { rows } = await db.pool.query<{ xmax: string }>(
      `SELECT xmax::text FROM skiplock.schedules WHERE name = 'held-paused'`,
    );
    expect(rows[0]!.xmax).toBe('0');
    // Another scheduler's pass holds 'held' and has written it (stalled before its commit):
    // this pass skips it and goes on. Before, recording it again waited for that pass to end,
    // and so did every schedule after it.
    const other = await db.pool.connect();
    try {
      await other.query('BEGIN');
      await other.query(`SELECT 1 FROM skiplock.schedules WHERE name = 'held' FOR UPDATE`);
      await other.query(`UPDATE skiplock.schedules SET seen_at = now() WHERE name = 'held'`);
      const pass = scheduler.runOnce({ now: minutes(t0, 2) });
      const timedOut = new Promise<'waited'>((r) => setTimeout(() => r('waited'), 5_000));
      const result = await Promise.race([pass, timedOut]);
      expect(result).not.toBe('waited');
      expect(result).toMatchObject({ skipped: ['held', 'held-paused'] });
      expect(await ticksOf('held-other')).toContain('2026-05-01T00:02:00.000Z');
    } finally {
      await other.query('ROLLBACK');
      other.release();
    }
  });

  it("a starting scheduler's first pass does not wait for a schedule another transaction holds: the others run, and it is recorded once free", async () => {
    const j = job('start-held');
    const define = (name: string) => everyMinute(name, j);
    const t0 = at('2026-05-02T00:00:30Z');
    const first = createScheduler({
      pool: db.newPool(2),
      schedules: [define('start-held'), define('start-free')],
      logger: quiet,
    });
    await first.runOnce({ now: t0 });
    // Another process's pass holds 'start-held' (stalled before its commit, a paused VM say).
    const other = await db.pool.connect();
    const logs = captureLogs();
    const next = createScheduler({
      pool: db.newPool(2),
      schedules: [define('start-held'), define('start-free')],
      logger: logs.logger,
    });
    try {
      await other.query('BEGIN');
      await other.query(`SELECT 1 FROM skiplock.schedules WHERE name = 'start-held' FOR UPDATE`);
      // Before: its start-up record waited for the holder with no bound, and ran nothing.
      const pass = next.runOnce({ now: minutes(t0, 1) });
      const timedOut = new Promise<'waited'>((r) => setTimeout(() => r('waited'), 5_000));
      const result = await Promise.race([pass, timedOut]);
      expect(result).not.toBe('waited');
      expect(result).toMatchObject({ skipped: ['start-held'], enqueued: { 'start-free': 1 } });
      expect(logs.lines.filter((l) => l.reason === 'schedule_record_deferred')).toMatchObject([
        { schedule: 'start-held' },
      ]);
      // Still held at the next pass: skipped again, logged once.
      expect(await next.runOnce({ now: minutes(t0, 2) })).toMatchObject({
        skipped: ['start-held'],
      });
      expect(logs.reasons().filter((r) => r === 'schedule_record_deferred')).toHaveLength(1);
      await other.query('ROLLBACK');
      // Free again: recorded, and run.
      const free = await next.runOnce({ now: minutes(t0, 3) });
      expect(free).toMatchObject({ skipped: [], enqueued: { 'start-free': 1 } });
      expect(await ticksOf('start-held')).toContain('2026-05-02T00:03:00.000Z');
    } finally {
      await other.query('ROLLBACK').catch(() => {});
      other.release();
    }
  });

  it("enqueues every on-time tick of a pass under 'skip', past the 1,000 of one round: a seconds cron on an hourly interval loses none", async () => {
    const j = job('seconds');
    const seconds = defineSchedule({
      name: 'seconds',
      cron: '* * * * * *',
      job: j,
      payload: (t) => ({ at: t.toISOString() }),
    });
    const scheduler = createScheduler({
      pool: db.newPool(2),
      schedules: [seconds],
      logger: quiet,
      intervalMs: 3_600_000,
    });
    const t0 = at('2026-05-03T00:00:00Z');
    await scheduler.runOnce({ now: t0 });
    // An hour later (the interval; the on-time window is 1.5 of it): 3,600 ticks are on time.
    // Before: 1,000, and the next pass started at its window, past the other 2,600.
    expect(await scheduler.runOnce({ now: new Date(t0.getTime() + 3_600_000) })).toMatchObject({
      enqueued: { seconds: 3_600 },
    });
    const ticks = await ticksOf('seconds');
    expect(ticks).toHaveLength(3_600);
    expect(ticks[0]).toBe('2026-05-03T00:00:01.000Z');
    expect(ticks.at(-1)).toBe('2026-05-03T01:00:00.000Z');
  });

  it("skips a tick whose payload function throws or whose payload the job refuses when the pass's other ticks are taken; all refused, the pass fails and they stay due", async () => {
    const j = job('refused');
    const bad = { throws: '2026-05-04T00:02:00.000Z', invalid: '2026-05-04T00:03:00.000Z' };
    let allBad = false;
    let allInvalid = false;
    const schedule = defineSchedule({
      name: 'refused',
      cron: '* * * * *',
      job: j,
      catchUp: { withinMs: 3_600_000 },
      payload: (t) => {
        const at = t.toISOString();
        if (at === bad.throws || allBad) throw new Error('no such date');
        // The job's schema wants a string.
        return { at: at === bad.invalid || allInvalid ? (42 as unknown as string) : at };
      },
    });
    const logs = captureLogs();
    const scheduler = createScheduler({
      pool: db.newPool(2),
      schedules: [schedule],
      logger: logs.logger,
    });
    const t0 = at('2026-05-04T00:00:00Z');
    await scheduler.runOnce({ now: t0 });
    // Before: the whole pass failed on every try, and no tick after 00:02 was ever enqueued
    // while 00:02 stayed inside the hour's catch-up window.
    expect(await scheduler.runOnce({ now: minutes(t0, 5) })).toMatchObject({
      enqueued: { refused: 3 },
      failed: [],
    });
    expect(await ticksOf('refused')).toEqual([
      '2026-05-04T00:01:00.000Z',
      '2026-05-04T00:04:00.000Z',
      '2026-05-04T00:05:00.000Z',
    ]);
    expect(logs.lines.find((l) => l.reason === 'schedule_ticks_refused')).toMatchObject({
      schedule: 'refused',
      count: 2,
      first: bad.throws,
    });
    // Every tick refused (a payload bug): the pass fails, and its ticks stay due for the fix.
    allBad = true;
    expect(await scheduler.runOnce({ now: minutes(t0, 7) })).toMatchObject({ failed: ['refused'] });
    allBad = false;
    expect(await scheduler.runOnce({ now: minutes(t0, 8) })).toMatchObject({
      enqueued: { refused: 3 },
    });
    expect((await ticksOf('refused')).slice(-3)).toEqual([
      '2026-05-04T00:06:00.000Z',
      '2026-05-04T00:07:00.000Z',
      '2026-05-04T00:08:00.000Z',
    ]);
    // Every payload refused by the job (a schema bug) over 30 due ticks: the pass fails after the
    // bulk and ten single tries, not one try (and one client log line) per tick.
    allInvalid = true;
    const refusedLines = () => logs.reasons().filter((r) => r === 'invalid_payload').length;
    const before = refusedLines();
    expect(await scheduler.runOnce({ now: minutes(t0, 38) })).toMatchObject({
      failed: ['refused'],
    });
    expect(refusedLines() - before).toBe(11);
  });

  it('a pause given a pool waits 2 s for a row a stalled pass holds, then fails busy and changes nothing', async () => {
    const j = job('pause-held');
    const scheduler = createScheduler({
      pool: db.newPool(2),
      schedules: [everyMinute('pause-held', j)],
      logger: quiet,
    });
    await scheduler.runOnce({ now: at('2026-05-05T00:00:30Z') });
    const other = await db.pool.connect();
    try {
      await other.query('BEGIN');
      await other.query(`SELECT 1 FROM skiplock.schedules WHERE name = 'pause-held' FOR UPDATE`);
      // Before: the pause waited as long as the holder did (a dashboard request with it).
      const pausing = pauseSchedule(db.pool, 'pause-held').then(
        () => 'paused',
        (error: unknown) => error,
      );
      const timedOut = new Promise<'waited'>((r) => setTimeout(() => r('waited'), 6_000));
      const outcome = await Promise.race([pausing, timedOut]);
      expect(outcome).toBeInstanceOf(SkiplockError);
      expect(outcome).toMatchObject({ code: 'schedule_busy' });
      await other.query('ROLLBACK');
      expect((await listSchedules(db.pool)).find((r) => r.name === 'pause-held')).toMatchObject({
        paused: false,
      });
      // Free, it pauses.
      expect((await pauseSchedule(db.pool, 'pause-held'))?.paused).toBe(true);
    } finally {
      await other.query('ROLLBACK').catch(() => {});
      other.release();
    }
  });

  it('of two schedulers recording a removed schedule again, the second does not wait for the first', async () => {
    const j = job('recorders');
    const define = (name: string) => everyMinute(name, j);
    // A's commits can be held, as if its process stalled between its insert and its commit.
    const poolA = db.newPool(2);
    let holdCommitMs = 0;
    poolA.on('connect', (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
      (client as { query: unknown }).query = async (...args: unknown[]) => {
        const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string })?.text;
        if (text === 'COMMIT' && holdCommitMs > 0) {
          await new Promise((r) => setTimeout(r, holdCommitMs));
        }
        return query(...args);
      };
    });
    const a = createScheduler({ pool: poolA, schedules: [define('rec-1')], logger: quiet });
    const b = createScheduler({
      pool: db.newPool(2),
      schedules: [define('rec-1'), define('rec-2')],
      logger: quiet,
    });
    const t0 = at('2026-06-01T00:00:30Z');
    await a.runOnce({ now: t0 });
    await b.runOnce({ now: t0 });
    await removeSchedule(db.pool, 'rec-1', { force: true });
    holdCommitMs = 3_000;
    const first = a.runOnce({ now: minutes(t0, 1) });
    // A has recorded rec-1 again and not committed; B's pass skips it and goes on to rec-2.
    await waitFor(
      async () =>
        (
          await db.pool.query(
            `SELECT 1 FROM pg_stat_activity WHERE state = 'idle in transaction'
             AND datname = current_database() AND query LIKE '%pg_try_advisory_xact_lock%'`,
          )
        ).rowCount === 1,
      { what: "A's open re-record" },
    );
    const started = Date.now();
    const second = await b.runOnce({ now: minutes(t0, 1) });
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(second).toMatchObject({ skipped: ['rec-1'], enqueued: { 'rec-2': 1 } });
    expect(await first).toMatchObject({ enqueued: { 'rec-1': 0 } });
    holdCommitMs = 0;
    expect((await listSchedules(db.pool)).map((s) => s.name)).toContain('rec-1');
  });

  it('removing a schedule held by one pass after another, with no moment free, waits its turn', async () => {
    const scheduler = createScheduler({
      pool: db.pool,
      schedules: [everyMinute('handoff', job('handoff'))],
      logger: quiet,
    });
    await scheduler.runOnce({ now: at('2026-04-01T00:00:30Z') });
    // Two transactions hand the row to each other: the next one waits for it before the one
    // holding it commits, so it is never free. Before, the removal skipped it on every try and
    // gave up after 2 s (schedule_busy); now it waits in line behind the next holder. (A pass
    // also updates the row; a hand-over then leaves the new version free for an instant, which
    // polling hits by luck, so this test holds it with the lock alone.)
    const [a, b] = [await db.pool.connect(), await db.pool.connect()];
    const take = async (c: typeof a) =>
      (await c.query(`SELECT 1 FROM skiplock.schedules WHERE name = 'handoff' FOR UPDATE`))
        .rowCount === 1;
    let handoffs = 0;
    const handing = (async () => {
      let [holder, next] = [a, b];
      await holder.query('BEGIN');
      await take(holder);
      for (const started = Date.now(); Date.now() - started < 6_000;) {
        await next.query('BEGIN');
        const taken = take(next);
        await new Promise((r) => setTimeout(r, 100));
        await holder.query('COMMIT');
        handoffs += 1;
        [holder, next] = [next, holder];
        if (!(await taken)) break;
      }
    })();
    try {
      await new Promise((r) => setTimeout(r, 250));
      const started = Date.now();
      const removed = await removeSchedule(db.pool, 'handoff', { force: true });
      expect(removed).toMatchObject({ name: 'handoff' });
      expect(Date.now() - started).toBeLessThan(2_000);
      await handing;
      expect(handoffs).toBeGreaterThanOrEqual(2);
    } finally {
      await handing.catch(() => {});
      // Whichever still holds a transaction (the loop's last taker) ends it here.
      for (const c of [a, b]) {
        await c.query('ROLLBACK');
        c.release();
      }
    }
    expect((await listSchedules(db.pool)).map((s) => s.name)).not.toContain('handoff');
  });

  it('removing a schedule from a pool whose sessions default to REPEATABLE READ says the row changed when a pass updated it', async () => {
    const scheduler = createScheduler({
      pool: db.pool,
      schedules: [everyMinute('rr', job('rr'))],
      logger: quiet,
    });
    await scheduler.runOnce({ now: at('2026-04-01T00:00:30Z') });
    const rr = new pg.Pool({
      connectionString: db.url,
      options: '-c default_transaction_isolation=repeatable\\ read',
      max: 1,
    });
    rr.on('error', () => {});
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`UPDATE skiplock.schedules SET updated_at = now() WHERE name = 'rr'`);
      const removal = removeSchedule(rr, 'rr', { force: true }).catch((e: unknown) => e);
      await new Promise((r) => setTimeout(r, 300));
      await holder.query('COMMIT');
      // Before: PostgreSQL's "could not serialize access due to concurrent update" as it was.
      expect(await removal).toMatchObject({
        code: 'schedule_busy',
        message: expect.stringMatching(/^schedule "rr" changed while the removal waited for it/),
      });
    } finally {
      holder.release();
      await rr.end();
    }
    expect((await listSchedules(db.pool)).map((s) => s.name)).toContain('rr');
  });

  it('removing a schedule on a connection skips a held row and tries again', async () => {
    const scheduler = createScheduler({
      pool: db.pool,
      schedules: [everyMinute('on-conn', job('on-conn'))],
      logger: quiet,
    });
    await scheduler.runOnce({ now: at('2026-04-01T00:00:30Z') });
    const [holder, caller] = [await db.pool.connect(), await db.pool.connect()];
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM skiplock.schedules WHERE name = 'on-conn' FOR UPDATE`);
      // In the caller's transaction, whose lock_timeout the removal leaves as it was.
      await caller.query('BEGIN');
      await caller.query(`SET LOCAL lock_timeout = '7s'`);
      const removal = removeSchedule(caller, 'on-conn', { force: true });
      await new Promise((r) => setTimeout(r, 300));
      await holder.query('COMMIT');
      expect(await removal).toMatchObject({ name: 'on-conn' });
      expect((await caller.query('SHOW lock_timeout')).rows[0]).toEqual({ lock_timeout: '7s' });
      await caller.query('COMMIT');
    } finally {
      holder.release();
      caller.release();
    }
    expect((await listSchedules(db.pool)).map((s) => s.name)).not.toContain('on-conn');
  });

  it('removing a schedule judges what a scheduler pass holding it wrote, after it commits', async () => {
    const j = job('contended');
    const scheduler = createScheduler({
      pool: db.pool,
      schedules: [everyMinute('contended', j)],
      logger: quiet,
    });
    await scheduler.runOnce({ now: at('2026-04-01T00:00:30Z') });
    await markUnseen('contended');
    // A scheduler's pass holds the row and marks it seen; the removal waits for it, then reads
    // the mark: the schedule is active again, and stays.
    const pass = await db.pool.connect();
    try {
      await pass.query('BEGIN');
      await pass.query(`SELECT 1 FROM skiplock.schedules WHERE name = 'contended' FOR UPDATE`);
      await pass.query(
        `UPDATE skiplock.schedules SET seen_at = clock_timestamp() WHERE name = 'contended'`,
      );
      let settled = false;
      const removal = removeSchedule(db.pool, 'contended')
        .catch((e: unknown) => e)
        .finally(() => (settled = true));
      await new Promise((r) => setTimeout(r, 300));
      expect(settled).toBe(false);
      await pass.query('COMMIT');
      expect(await removal).toMatchObject({
        code: 'schedule_in_use',
        message: expect.stringMatching(/is active/),
      });
    } finally {
      pass.release();
    }
    // A pass stalled before its commit: the removal gives up after 2 s instead of hanging with
    // it (before, it waited on the row lock for as long), and removes nothing.
    await markUnseen('contended');
    const stalled = await db.pool.connect();
    try {
      await stalled.query('BEGIN');
      await stalled.query(`SELECT 1 FROM skiplock.schedules WHERE name = 'contended' FOR UPDATE`);
      const started = Date.now();
      const removal = removeSchedule(db.pool, 'contended').catch((e: unknown) => e);
      const result = await Promise.race([
        removal,
        new Promise((r) => setTimeout(() => r('hung'), 6_000)),
      ]);
      expect(result).toMatchObject({
        code: 'schedule_busy',
        message: expect.stringMatching(
          /^schedule "contended" was held by another transaction \(a scheduler's pass, a pause, a resume or another removal\) for 2 s; nothing was removed: try again/,
        ),
      });
      expect(Date.now() - started).toBeGreaterThanOrEqual(2_000);
    } finally {
      await stalled.query('ROLLBACK');
      stalled.release();
    }
    expect((await listSchedules(db.pool)).map((s) => s.name)).toContain('contended');
  });

  it('remove refuses a name that is not a string and options it does not know, and finds no schedule of a name none can have', async () => {
    for (const bad of [undefined, null, 5]) {
      const error = await removeSchedule(db.pool, bad as unknown as string).catch(
        (e: unknown) => e,
      );
      expect(error).toMatchObject({ code: 'invalid_name' });
    }
    expect(await removeSchedule(db.pool, 'a\u0000b')).toBeNull();
    expect(await removeSchedule(db.pool, '')).toBeNull();
    for (const [options, message] of [
      [{ force: 'yes' }, /invalid removeSchedule options: force: /],
      [{ forced: true }, /invalid removeSchedule options: .*forced/],
    ] as const) {
      const error = await removeSchedule(db.pool, 'x', options as never).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as Error).message).toMatch(message);
    }
  });

  it("under 'skip', a scheduler with a slow interval enqueues every tick it passes in time", async () => {
    const logs = captureLogs();
    const s = defineSchedule({
      name: 'slow-interval',
      cron: '0 * * * *',
      job: job('slow-interval'),
      payload: (t) => ({ at: t.toISOString() }),
    });
    const scheduler = createScheduler({
      pool: db.pool,
      schedules: [s],
      logger: logs.logger,
      intervalMs: 300_000,
    });
    // A pass every 5 minutes, the last one 6 minutes after the one before (the jitter's most).
    const t0 = at('2026-06-01T00:02:00Z');
    for (let m = 0; m <= 175; m += 5) await scheduler.runOnce({ now: minutes(t0, m) });
    await scheduler.runOnce({ now: minutes(t0, 181) });
    // Before: every hourly tick was more than a minute late at the pass after it, and skipped.
    expect(await ticksOf('slow-interval')).toEqual([
      '2026-06-01T01:00:00.000Z',
      '2026-06-01T02:00:00.000Z',
      '2026-06-01T03:00:00.000Z',
    ]);
    expect(logs.reasons()).not.toContain('schedule_ticks_missed');
  });

  it("under 'latest', a running scheduler enqueues every tick it passes in time, not only the newest", async () => {
    const s = defineSchedule({
      name: 'latest-running',
      cron: '* * * * *',
      job: job('latest-running'),
      payload: (t) => ({ at: t.toISOString() }),
      catchUp: 'latest',
    });
    // A pass every 5 minutes: each finds the five ticks since the last one, all on time.
    const scheduler = createScheduler({
      pool: db.pool,
      schedules: [s],
      logger: quiet,
      intervalMs: 300_000,
    });
    const t0 = at('2026-06-02T00:00:30Z');
    for (let m = 0; m <= 10; m += 5) await scheduler.runOnce({ now: minutes(t0, m) });
    // Before: only the newest tick of each pass, 00:05 and 00:10.
    expect(await ticksOf('latest-running')).toEqual(
      [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].map((m) =>
        minutes(at('2026-06-02T00:00:00Z'), m).toISOString(),
      ),
    );
    // Down for an hour: the newest missed tick once, as before (with a scheduler whose on-time
    // window is the minute).
    const fast = createScheduler({ pool: db.pool, schedules: [s], logger: quiet });
    await fast.runOnce({ now: minutes(t0, 75) });
    expect((await ticksOf('latest-running')).slice(10)).toEqual(['2026-06-02T01:15:00.000Z']);
  });

  it('starts a changed cron at the change, replaying none of its ticks before it', async () => {
    const j = job('redefined');
    const define = (cron: string) =>
      defineSchedule({
        name: 'redefined',
        cron,
        job: j,
        payload: (t) => ({ at: t.toISOString() }),
        catchUp: { withinMs: 86_400_000 },
      });
    const daily = createScheduler({
      pool: db.pool,
      schedules: [define('0 0 * * *')],
      logger: quiet,
    });
    await daily.runOnce({ now: at('2026-05-01T23:59:30Z') });
    await daily.runOnce({ now: at('2026-05-02T00:00:30Z') });
    // Redeployed as hourly at 10:30: the hours before the change were not its ticks.
    const hourly = createScheduler({
      pool: db.pool,
      schedules: [define('0 * * * *')],
      logger: quiet,
    });
    expect((await hourly.runOnce({ now: at('2026-05-02T10:30:00Z') })).enqueued).toEqual({
      redefined: 0,
    });
    await hourly.runOnce({ now: at('2026-05-02T11:00:30Z') });
    // Before: 01:00 to 10:00 were enqueued at 10:30, as missed ticks.
    expect(await ticksOf('redefined')).toEqual([
      '2026-05-02T00:00:00.000Z',
      '2026-05-02T11:00:00.000Z',
    ]);
    // Redefined with the same cron (another process of the same deploy): nothing moves.
    const again = createScheduler({
      pool: db.pool,
      schedules: [define('0 * * * *')],
      logger: quiet,
    });
    await again.runOnce({ now: at('2026-05-02T13:00:30Z') });
    expect((await ticksOf('redefined')).slice(2)).toEqual([
      '2026-05-02T12:00:00.000Z',
      '2026-05-02T13:00:00.000Z',
    ]);
  });

  it('a process with another definition than the recorded one leaves the schedule to it, until nobody runs it', async () => {
    const logs = captureLogs();
    const j = job('drift');
    const define = (cron: string) =>
      defineSchedule({ name: 'drift', cron, job: j, payload: (t) => ({ at: t.toISOString() }) });
    // Two processes of a rolling deploy, each with its own pool: the old one's cron is hourly on
    // the hour, the new one's on the half hour. (Times after the database's clock, so that the
    // row's updated_at, written in it, is in their past.)
    const old = createScheduler({
      pool: db.newPool(2),
      schedules: [define('0 * * * *')],
      logger: logs.logger,
    });
    const newer = createScheduler({
      pool: db.newPool(2),
      schedules: [define('30 * * * *')],
      logger: quiet,
    });
    // The new process passes only at these times here, far apart: as written by a version before
    // migration 0018 (no `seen_at`), it is judged by its ticks alone.
    const next = {
      async runOnce(o: { now: Date }) {
        const result = await newer.runOnce(o);
        await db.pool.query(
          `UPDATE skiplock.schedules SET seen_at = NULL, seen_for = NULL WHERE name = 'drift'`,
        );
        return result;
      },
    };
    // January 1st of the year after next, so the test never falls behind the real clock.
    const day = `${new Date().getUTCFullYear() + 2}-01-01`;
    const hour = (hm: string) => at(`${day}T${hm}Z`);
    await old.runOnce({ now: hour('00:10:00') });
    await next.runOnce({ now: hour('00:20:00') });
    const skipped: string[][] = [];
    for (const [scheduler, time] of [
      [next, '00:30:30'],
      [old, '01:00:30'],
      [next, '01:30:30'],
      [old, '01:31:00'],
      [old, '02:00:30'],
      [next, '02:30:30'],
      // The new process is gone (the deploy rolled back): its 03:30 tick is on time at first...
      [old, '03:30:30'],
    ] as const) {
      skipped.push((await scheduler.runOnce({ now: hour(time) })).skipped);
    }
    // Before: the old process enqueued its 01:00 and 02:00 too, both crons ran.
    expect(await ticksOf('drift')).toEqual(
      ['00:30', '01:30', '02:30'].map((hm) => `${day}T${hm}:00.000Z`),
    );
    expect(skipped).toEqual([[], ['drift'], [], ['drift'], ['drift'], [], ['drift']]);
    const differs = logs.lines.filter((l) => l.reason === 'schedule_definition_differs');
    expect(differs).toHaveLength(1);
    expect(differs[0]).toMatchObject({
      schedule: 'drift',
      recorded: { cron: '30 * * * *' },
      own: { cron: '0 * * * *' },
    });
    // ...then late: no scheduler runs the recorded cron, so the old process records its own.
    await old.runOnce({ now: hour('03:31:31') });
    expect(logs.lines.find((l) => l.reason === 'schedule_definition_taken_over')).toMatchObject({
      why: 'ticks_late',
    });
    expect((await listSchedules(db.pool)).find((x) => x.name === 'drift')?.cron).toBe('0 * * * *');
    await old.runOnce({ now: hour('04:00:30') });
    expect((await ticksOf('drift')).slice(3)).toEqual([`${day}T04:00:00.000Z`]);
  });

  it("judges the recorded definition's scheduler by its own on-time window, not this one's", async () => {
    const logs = captureLogs();
    const j = job('slow-pass');
    const define = (cron: string) =>
      defineSchedule({
        name: 'slow-pass',
        cron,
        job: j,
        payload: (t) => ({ at: t.toISOString() }),
      });
    // The recorded side passes every 5 minutes (its ticks wait up to that long, on time for it);
    // another process with another cron passes every minute. Times after the database's clock.
    const slow = createScheduler({
      pool: db.newPool(2),
      schedules: [define('* * * * *')],
      logger: quiet,
      intervalMs: 300_000,
    });
    const other = createScheduler({
      pool: db.newPool(2),
      schedules: [define('30 * * * *')],
      logger: logs.logger,
    });
    const day = `${new Date().getUTCFullYear() + 2}-02-01`;
    const at = (hm: string) => new Date(`${day}T${hm}Z`);
    await other.runOnce({ now: at('10:00:10') });
    await slow.runOnce({ now: at('10:00:20') });
    for (let minute = 1; minute <= 15; minute++) {
      const mm = String(minute).padStart(2, '0');
      if (minute % 5 === 0) await slow.runOnce({ now: at(`10:${mm}:20`) });
      // Before: taken over at 10:02:40, a tick (10:01) being late past this process's minute.
      expect((await other.runOnce({ now: at(`10:${mm}:40`) })).skipped).toEqual(['slow-pass']);
    }
    expect(logs.reasons()).not.toContain('schedule_definition_taken_over');
    expect((await listSchedules(db.pool)).find((x) => x.name === 'slow-pass')?.cron).toBe(
      '* * * * *',
    );
    expect(await ticksOf('slow-pass')).toHaveLength(15);
  });

  it('takes over a recorded definition none has been seen running for twice the on-time window, though none of its ticks is due', async () => {
    const logs = captureLogs();
    const j = job('unseen');
    const define = (cron: string) =>
      defineSchedule({ name: 'unseen', cron, job: j, payload: (t) => ({ at: t.toISOString() }) });
    const other = createScheduler({
      pool: db.newPool(2),
      schedules: [define('* * * * *')],
      logger: logs.logger,
    });
    // The recorded definition fires once a year: its ticks cannot show whether anything runs it.
    const yearly = createScheduler({
      pool: db.newPool(2),
      schedules: [define('0 0 1 1 *')],
      logger: quiet,
    });
    const day = `${new Date().getUTCFullYear() + 2}-03-01`;
    const at = (s: number) => new Date(Date.parse(`${day}T10:00:00Z`) + s * 1000);
    await other.runOnce({ now: at(0) });
    await yearly.runOnce({ now: at(10) });
    const skipped: number[] = [];
    // Both pass every 30 s for 5 minutes; then the yearly one's process is gone.
    for (let t = 30; t <= 600; t += 30) {
      if (t <= 300) await yearly.runOnce({ now: at(t) });
      if ((await other.runOnce({ now: at(t + 10) })).skipped.includes('unseen')) skipped.push(t);
    }
    // Seen last at 10:05:00: left alone while it ran and for two on-time windows (60 s) after.
    expect(skipped).toEqual(Array.from({ length: 13 }, (_, i) => 30 * (i + 1)));
    expect(logs.lines.find((l) => l.reason === 'schedule_definition_taken_over')).toMatchObject({
      schedule: 'unseen',
      why: 'not_seen',
      recorded: { cron: '0 0 1 1 *' },
      own: { cron: '* * * * *' },
    });
    const state = (await listSchedules(db.pool)).find((x) => x.name === 'unseen');
    expect(state?.cron).toBe('* * * * *');
    expect(state?.seenAt).toEqual(at(610));
    // Its own ticks after the takeover (10:07:10), none before it.
    expect(await ticksOf('unseen')).toEqual(
      ['08', '09', '10'].map((mm) => `${day}T10:${mm}:00.000Z`),
    );
  });

  it('judges the recorded definition by the longest on-time window of the schedulers running it, so a slow one is not taken over when a fast one leaves', async () => {
    const logs = captureLogs();
    const j = job('two-paces');
    const define = (cron: string) =>
      defineSchedule({
        name: 'two-paces',
        cron,
        job: j,
        payload: (t) => ({ at: t.toISOString() }),
      });
    // Two processes run the recorded (yearly) definition: one at the default 1 s interval, one
    // every 5 minutes (on-time window 450 s); a third, with another cron, defers to them.
    const other = createScheduler({
      pool: db.newPool(2),
      schedules: [define('* * * * *')],
      logger: logs.logger,
    });
    const fast = createScheduler({
      pool: db.newPool(2),
      schedules: [define('0 0 1 1 *')],
      logger: quiet,
    });
    const slow = createScheduler({
      pool: db.newPool(2),
      schedules: [define('0 0 1 1 *')],
      logger: quiet,
      intervalMs: 300_000,
    });
    const day = `${new Date().getUTCFullYear() + 2}-05-01`;
    const at = (s: number) => new Date(Date.parse(`${day}T10:00:00Z`) + s * 1000);
    await other.runOnce({ now: at(0) });
    await fast.runOnce({ now: at(3) });
    for (let t = 30; t <= 960; t += 30) {
      // The fast process is gone after 10:05; the slow one passes every 5 minutes throughout.
      if (t <= 300) await fast.runOnce({ now: at(t) });
      if (t % 300 === 0) await slow.runOnce({ now: at(t + 6) });
      // Before: taken over at 10:07:10, two of the fast one's windows after it left.
      expect((await other.runOnce({ now: at(t + 10) })).skipped).toEqual(['two-paces']);
    }
    expect(logs.reasons()).not.toContain('schedule_definition_taken_over');
    expect((await listSchedules(db.pool)).find((x) => x.name === 'two-paces')?.cron).toBe(
      '0 0 1 1 *',
    );
  });

  it('marks a schedule seen at most every half on-time window, and counts a resume as seen', async () => {
    const j = job('marks');
    const define = (cron: string) =>
      defineSchedule({ name: 'marks', cron, job: j, payload: (t) => ({ at: t.toISOString() }) });
    const recorded = createScheduler({
      pool: db.newPool(2),
      schedules: [define('0 0 1 1 *')],
      logger: quiet,
    });
    const logs = captureLogs();
    const other = createScheduler({
      pool: db.newPool(2),
      schedules: [define('* * * * *')],
      logger: logs.logger,
    });
    // In the database's clock: a pause and a resume move `updated_at` in it.
    const dbNow = (await db.pool.query<{ now: Date }>('SELECT clock_timestamp() AS now')).rows[0]!
      .now;
    const at = (s: number) => new Date(dbNow.getTime() + s * 1000);
    const seenAt = async () =>
      (await listSchedules(db.pool)).find((x) => x.name === 'marks')?.seenAt?.getTime();
    await other.runOnce({ now: at(-600) });
    await recorded.runOnce({ now: at(-590) });
    expect(await seenAt()).toBe(at(-590).getTime());
    // Recorded then, in the database's clock too (the test's passes are in its past).
    await db.pool.query(`UPDATE skiplock.schedules SET updated_at = $1 WHERE name = 'marks'`, [
      at(-590),
    ]);
    // No tick moves the row: 29 s later it is not written; 30 s later it is.
    await recorded.runOnce({ now: at(-561) });
    expect(await seenAt()).toBe(at(-590).getTime());
    await recorded.runOnce({ now: at(-560) });
    expect(await seenAt()).toBe(at(-560).getTime());
    // A mark in the future (a pass given a later now) reads as just seen, never as negative.
    const ahead = createScheduler({
      pool: db.newPool(2),
      schedules: [
        defineSchedule({
          name: 'marks-ahead',
          cron: '*/5 * * * *',
          job: j,
          payload: (t) => ({ at: t.toISOString() }),
        }),
      ],
      logger: quiet,
    });
    await ahead.runOnce({ now: at(3_600) });
    const future = (await listSchedules(db.pool)).find((x) => x.name === 'marks-ahead');
    expect(future?.sinceSeenMs).toBe(0);
    // Paused for nine minutes (neither marked nor judged), then resumed: the recorded scheduler's
    // next pass may be up to a pass away, so the resume counts as seen.
    await pauseSchedule(db.pool, 'marks');
    expect((await other.runOnce({ now: at(-5) })).skipped).toEqual(['marks']);
    await resumeSchedule(db.pool, 'marks');
    expect((await other.runOnce({ now: at(5) })).skipped).toEqual(['marks']);
    expect(logs.reasons()).not.toContain('schedule_definition_taken_over');
    await other.runOnce({ now: at(130) });
    expect(logs.reasons()).toContain('schedule_definition_taken_over');
  });

  it('takes over a recorded definition it cannot read once none is seen running it, and only by what was seen of that definition', async () => {
    const logs = captureLogs();
    const j = job('unreadable');
    const other = createScheduler({
      pool: db.newPool(2),
      schedules: [
        defineSchedule({
          name: 'unreadable',
          cron: '*/5 * * * *',
          job: j,
          payload: (t) => ({ at: t.toISOString() }),
        }),
      ],
      logger: logs.logger,
    });
    const day = `${new Date().getUTCFullYear() + 2}-04-01`;
    const at = (s: number) => new Date(Date.parse(`${day}T10:00:00Z`) + s * 1000);
    await other.runOnce({ now: at(0) });
    // A newer version records a cron this one cannot read (as after a rollback past the version
    // that brought its syntax). First as a version that does not record who it saw: the
    // `seen_at` left behind is this process's own, for its own definition, and must not count.
    const record = (seen: boolean, t: number) =>
      db.pool.query(
        `UPDATE skiplock.schedules SET cron = 'every fortnight', updated_at = updated_at,
                seen_at = CASE WHEN $1 THEN $2::timestamptz ELSE seen_at END,
                seen_for = CASE WHEN $1 THEN jsonb_build_array('every fortnight', timezone, job_type, queue)
                                ELSE seen_for END
         WHERE name = 'unreadable'`,
        [seen, at(t).toISOString()],
      );
    await record(false, 5);
    const passes = async (from: number, to: number) => {
      const skipped: boolean[] = [];
      for (let t = from; t <= to; t += 30) {
        skipped.push((await other.runOnce({ now: at(t) })).skipped.includes('unreadable'));
      }
      return skipped;
    };
    // Half an hour: its own ticks (every 5 minutes) would have been due six times.
    expect(await passes(30, 1800)).toEqual(Array(60).fill(true));
    // Then a version that records who runs the schedule, seen until 10:40:00.
    for (let t = 1830; t <= 2400; t += 30) {
      await record(true, t);
      expect((await other.runOnce({ now: at(t + 10) })).skipped).toEqual(['unreadable']);
    }
    expect(await passes(2430, 2520)).toEqual([true, true, true, true]);
    expect(logs.reasons()).not.toContain('schedule_definition_taken_over');
    expect(await ticksOf('unreadable')).toEqual([]);
    expect(await passes(2550, 2550)).toEqual([false]);
    expect(logs.lines.find((l) => l.reason === 'schedule_definition_taken_over')).toMatchObject({
      why: 'not_seen',
      recorded: { cron: 'every fortnight' },
    });
    expect(logs.lines.filter((l) => l.reason === 'schedule_definition_differs')).toHaveLength(1);
    expect((await listSchedules(db.pool)).find((x) => x.name === 'unreadable')?.cron).toBe(
      '*/5 * * * *',
    );
    await other.runOnce({ now: at(2700) });
    expect(await ticksOf('unreadable')).toEqual([`${day}T10:45:00.000Z`]);
  });

  it('runs in a worker that has schedules, and one bad schedule does not hold up the others', async () => {
    const logs = captureLogs();
    const j = job('in-worker');
    const good = defineSchedule({
      name: 'in-worker-good',
      cron: '* * * * *',
      job: j,
      payload: (t) => ({ at: t.toISOString() }),
    });
    // The payload does not match the job's schema: refused at enqueue, logged, retried next pass.
    const bad = defineSchedule({
      name: 'in-worker-bad',
      cron: '* * * * *',
      job: j,
      payload: { at: 42 } as unknown as { at: string },
    });
    const worker = testWorker(db.pool, [j], { schedules: [bad, good], logger: logs.logger });
    expect(worker.scheduler).not.toBeNull();
    const t0 = at('2026-04-01T00:00:30Z');
    await worker.scheduler!.runOnce({ now: t0 });
    const result = await worker.scheduler!.runOnce({ now: minutes(t0, 1) });
    expect(result.failed).toEqual(['in-worker-bad']);
    expect(result.enqueued).toEqual({ 'in-worker-good': 1 });
    expect(logs.reasons()).toContain('schedule_failed');
    expect(await ticksOf('in-worker-bad')).toEqual([]);
    await worker.stop();
    expect(testWorker(db.pool, [j]).scheduler).toBeNull();
  });
});
