import pg from 'pg';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { createDatabaseClock } from '../src/database-clock.js';

const db = await useTestDatabase();

afterEach(() => {
  vi.useRealTimers();
});

describe("the dashboard's database clock", () => {
  it('reads the server once per refresh, whatever the number of requests, and later reads in the background', async () => {
    const pool = db.newPool(2);
    try {
      const reads = vi.spyOn(pool, 'query');
      const clock = createDatabaseClock(pool, captureLogs().logger, 400);
      // The first requests wait for the one read they share.
      const first = await Promise.all(Array.from({ length: 10 }, () => clock()));
      expect(reads).toHaveBeenCalledTimes(1);
      // This server's clock is the host's: the offset read is a round trip at most.
      for (const now of first) expect(Math.abs(now - Date.now())).toBeLessThan(1_000);
      for (let i = 0; i < 50; i++) await clock();
      expect(reads).toHaveBeenCalledTimes(1);
      await sleep(450);
      // Due again: the request that finds it due starts the read and does not wait for it.
      await clock();
      await waitFor(() => reads.mock.calls.length === 2);
      for (let i = 0; i < 50; i++) await clock();
      expect(reads).toHaveBeenCalledTimes(2);
    } finally {
      await pool.end();
    }
  });

  it('tries a failed read again after 5 s, not on every request, and logs each failure at debug', async () => {
    // Nothing listens on port 1: each connect is refused at once.
    const pool = new pg.Pool({ connectionString: 'postgres://skiplock@127.0.0.1:1/none', max: 1 });
    pool.on('error', () => {});
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      const logs = captureLogs();
      const reads = vi.spyOn(pool, 'query');
      const clock = createDatabaseClock(pool, logs.logger, 60_000);
      // The host's clock stands in while the server cannot be read.
      expect(Math.abs((await clock()) - Date.now())).toBeLessThan(1_000);
      await waitFor(() => logs.reasons().includes('dashboard_clock_unread'));
      for (let i = 0; i < 20; i++) await clock();
      vi.advanceTimersByTime(4_900);
      await clock();
      expect(reads).toHaveBeenCalledTimes(1);
      vi.advanceTimersByTime(200);
      await clock();
      await waitFor(
        () => logs.reasons().filter((r) => r === 'dashboard_clock_unread').length === 2,
      );
      expect(reads).toHaveBeenCalledTimes(2);
      expect(logs.lines.find((l) => l.reason === 'dashboard_clock_unread')).toMatchObject({
        level: 20,
      });
    } finally {
      vi.useRealTimers();
      await pool.end();
    }
  });
});
