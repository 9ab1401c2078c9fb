import { listSchedules, removeSchedule } from '@skiplock/queue';
import { describe, expect, it } from 'vitest';
import { bundleForNode } from '../support/bundle.js';
import { useTestDatabase } from '../support/db.js';
import { spawnNode } from '../support/processes.js';

const SCHEDULERS = 4;
const HOURS = 3;
/** Simulated milliseconds per wall-clock millisecond: 3 hours in about 15 s. */
const SPEED = 720;

const T0 = '2026-05-01T00:00:30.000Z';
/** Every minute tick of the three hours, as the keys hold them. */
const EXPECTED = Array.from({ length: HOURS * 60 }, (_, m) =>
  new Date(Date.parse('2026-05-01T00:01:00Z') + m * 60_000).toISOString(),
);

/**
 * Starts the scheduler processes on one simulated clock from T0: each runs passes back to back,
 * so they race for the schedule's row (SKIP LOCKED) and for its ticks' keys all the way.
 */
async function startSchedulers(url: string) {
  const script = await bundleForNode(new URL('./scheduler-process.ts', import.meta.url));
  const end = new Date(Date.parse(T0) + HOURS * 3_600_000 - 30_000).toISOString();
  const startAt = Date.now() + 3_000;
  const children = Array.from({ length: SCHEDULERS }, (_, i) =>
    spawnNode(`scheduler-${i}`, script, {
      DATABASE_URL: url,
      SCHED_T0: T0,
      SCHED_END: end,
      SCHED_SPEED: String(SPEED),
      SCHED_START_AT: String(startAt),
    }),
  );
  return { children, startAt };
}

describe('cron schedules without a leader', () => {
  it('4 scheduler processes racing over 3 simulated hours enqueue every minute tick exactly once', async () => {
    const db = await useTestDatabase();
    const { children } = await startSchedulers(db.url);
    const done = await Promise.all(
      children.map(async (c) => {
        const line = await c.waitForLine((l) => l.reason === 'done', 120_000);
        const { code } = await c.exited;
        expect(code, c.stderrTail()).toBe(0);
        expect(Number(line.passes)).toBeGreaterThan(100);
        return Number(line.enqueued);
      }),
    );
    const { rows } = await db.pool.query<{ key: string }>(
      `SELECT idempotency_key AS key FROM skiplock.jobs WHERE queue = 'race' ORDER BY 1`,
    );
    // Every tick of the three hours is there once; none before the schedule existed, none twice.
    expect(rows.map((r) => r.key.replace('schedule:race:', ''))).toEqual(EXPECTED);
    // And the processes' own counts agree: no pass thought it inserted a tick another had.
    expect(done.reduce((a, b) => a + b, 0)).toBe(EXPECTED.length);
    // The work was shared, not done by whichever process started first.
    expect(done.filter((n) => n > 0).length).toBeGreaterThan(1);
  });

  it('an operator removing the schedule while 4 processes race: one process records it again each time, and the ticks go on', async () => {
    const db = await useTestDatabase();
    const { children, startAt } = await startSchedulers(db.url);
    // Forced removals of the live schedule, 1.5 s (18 simulated minutes) apart, well before the
    // processes' end.
    await new Promise((r) => setTimeout(r, startAt + 2_000 - Date.now()));
    let removals = 0;
    for (let i = 0; i < 5; i++) {
      if (await removeSchedule(db.pool, 'race', { force: true })) removals += 1;
      await new Promise((r) => setTimeout(r, 1_500));
    }
    const done = await Promise.all(
      children.map(async (c) => {
        const line = await c.waitForLine((l) => l.reason === 'done', 120_000);
        const { code } = await c.exited;
        expect(code, c.stderrTail()).toBe(0);
        return Number(line.enqueued);
      }),
    );
    expect(removals).toBe(5);
    // Each removal was recorded again by one process only: the others skipped the row while it
    // was being recorded (its advisory lock) or found it there.
    const recordedAgain = children.flatMap((c) =>
      c.lines.filter((l) => l.reason === 'schedule_recorded_again'),
    );
    expect(recordedAgain).toHaveLength(removals);
    expect((await listSchedules(db.pool)).map((s) => s.name)).toEqual(['race']);
    const { rows } = await db.pool.query<{ key: string }>(
      `SELECT idempotency_key AS key FROM skiplock.jobs WHERE queue = 'race' ORDER BY 1`,
    );
    const ticks = rows.map((r) => r.key.replace('schedule:race:', ''));
    expect(done.reduce((a, b) => a + b, 0)).toBe(ticks.length);
    // Only ticks of the three hours, each once; a schedule recorded again starts from the pass
    // that records it, so the ticks between a removal and that pass are missing, a few minutes of
    // simulated time at most. Without recording it again, none after the first removal came.
    expect(new Set(ticks).size).toBe(ticks.length);
    expect(ticks.every((t) => EXPECTED.includes(t))).toBe(true);
    expect(EXPECTED.length - ticks.length).toBeLessThanOrEqual(5 * removals);
    expect(ticks.at(-1)).toBe(EXPECTED.at(-1));
  });
});
