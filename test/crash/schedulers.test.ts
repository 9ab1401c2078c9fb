import { describe, expect, it } from 'vitest';
import { bundleForNode } from '../support/bundle.js';
import { useTestDatabase } from '../support/db.js';
import { spawnNode } from '../support/processes.js';

const SCHEDULERS = 4;
const HOURS = 3;
/** Simulated milliseconds per wall-clock millisecond: 3 hours in about 15 s. */
const SPEED = 720;

describe('cron schedules without a leader', () => {
  it('4 scheduler processes racing over 3 simulated hours enqueue every minute tick exactly once', async () => {
    const db = await useTestDatabase();
    const script = await bundleForNode(new URL('./scheduler-process.ts', import.meta.url));
    const t0 = '2026-05-01T00:00:30.000Z';
    const end = new Date(Date.parse(t0) + HOURS * 3_600_000 - 30_000).toISOString();
    // Every process reads one simulated clock and runs passes back to back, so they race for the
    // schedule's row (SKIP LOCKED) and for its ticks' keys all the way.
    const startAt = String(Date.now() + 3_000);
    const children = Array.from({ length: SCHEDULERS }, (_, i) =>
      spawnNode(`scheduler-${i}`, script, {
        DATABASE_URL: db.url,
        SCHED_T0: t0,
        SCHED_END: end,
        SCHED_SPEED: String(SPEED),
        SCHED_START_AT: startAt,
      }),
    );
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
    const expected = Array.from({ length: HOURS * 60 }, (_, m) =>
      new Date(Date.parse('2026-05-01T00:01:00Z') + m * 60_000).toISOString(),
    );
    // Every tick of the three hours is there once; none before the schedule existed, none twice.
    expect(rows.map((r) => r.key.replace('schedule:race:', ''))).toEqual(expected);
    // And the processes' own counts agree: no pass thought it inserted a tick another had.
    expect(done.reduce((a, b) => a + b, 0)).toBe(expected.length);
    // The work was shared, not done by whichever process started first.
    expect(done.filter((n) => n > 0).length).toBeGreaterThan(1);
  });
});
