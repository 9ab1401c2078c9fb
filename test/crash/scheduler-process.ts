/**
 * One scheduler as a real OS process, for schedulers.test.ts. Every process reads the same
 * simulated clock, SCHED_SPEED times faster than the wall clock from SCHED_START_AT (epoch ms)
 * on, starting at SCHED_T0, and runs passes back to back until it reaches SCHED_END; then it runs
 * a last pass at SCHED_END (again while another process holds the schedule, as its next
 * interval would). It prints one JSON line `{ reason: 'done', enqueued, passes }`.
 */
import { createScheduler, defineJob, defineSchedule } from '@skiplock/queue';
import pg from 'pg';
import { pino } from 'pino';
import { z } from 'zod';

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`scheduler-process: set ${name}`);
  return value;
}

const t0 = Date.parse(env('SCHED_T0'));
const end = Date.parse(env('SCHED_END'));
const speed = Number(env('SCHED_SPEED'));
const startAt = Number(env('SCHED_START_AT'));
if ([t0, end, speed, startAt].some(Number.isNaN)) {
  throw new Error(
    'scheduler-process: SCHED_T0/SCHED_END must be times, SCHED_SPEED and SCHED_START_AT numbers',
  );
}

const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 2 });
const job = defineJob({
  type: 'race.tick',
  queue: 'race',
  payload: z.object({ at: z.string() }),
  handler: async () => {},
});
const schedule = defineSchedule({
  name: 'race',
  cron: '* * * * *',
  job,
  payload: (tick) => ({ at: tick.toISOString() }),
  // At this speed a pass held up 50 ms by CPU contention looks about a minute late; the window
  // keeps such ticks from counting as missed (the downtime policies are tested on their own).
  catchUp: { withinMs: 30 * 60_000 },
});
const scheduler = createScheduler({
  pool,
  schedules: [schedule],
  logger: pino({ level: 'warn' }),
});
const simulated = () => t0 + (Date.now() - startAt) * speed;
await new Promise((resolve) => setTimeout(resolve, Math.max(0, startAt - Date.now())));
let enqueued = 0;
let passes = 0;
for (let now = simulated(); now < end; now = simulated()) {
  enqueued += (await scheduler.runOnce({ now: new Date(now) })).enqueued.race ?? 0;
  passes += 1;
}
for (;;) {
  const last = await scheduler.runOnce({ now: new Date(end) });
  enqueued += last.enqueued.race ?? 0;
  passes += 1;
  if (last.skipped.length === 0) break;
  await new Promise((resolve) => setTimeout(resolve, 10));
}
await pool.end();
process.stdout.write(`${JSON.stringify({ reason: 'done', enqueued, passes })}\n`);
