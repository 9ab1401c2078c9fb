import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { runDemo } from './run-demo.js';

describe('pnpm demo --kill-workers', () => {
  it(
    'SIGKILLs a worker mid-run and every saga still ends completed or compensated',
    { timeout: 120_000 },
    async () => {
      const adminUrl = inject('adminUrl');
      const run = await runDemo(['--count', '40', '--kill-workers', '--keep'], {
        DATABASE_URL: adminUrl,
      });
      // Named when it is created, so that it is dropped whatever happens after.
      const kept = /fresh database (skiplock_demo_\w+)/.exec(run.stdout)?.[1];
      const admin = new pg.Client({ connectionString: adminUrl });
      await admin.connect();
      try {
        expect(run.code, run.stdout + run.stderr).toBe(0);
        expect(run.stdout).toContain(`Kept database ${kept} on the DATABASE_URL server`);
        const url = new URL(adminUrl);
        url.pathname = `/${kept}`;
        const demo = new pg.Client({ connectionString: url.toString() });
        await demo.connect();
        try {
          // Every saga job leases for the demo's 3 s, the first steps the starter inserted and
          // the waits for the webhook too: a job the killed worker held comes back within
          // seconds. Before, those leased for the queue's 30 s and the run stalled as long.
          const { rows } = await demo.query<{ lease_ms: number; jobs: number }>(
            `SELECT lease_ms, count(*)::int AS jobs FROM skiplock.jobs
             WHERE job_type LIKE 'saga:%' GROUP BY lease_ms`,
          );
          expect(rows).toEqual([{ lease_ms: 3_000, jobs: expect.any(Number) }]);
        } finally {
          await demo.end();
        }
      } finally {
        if (kept) await admin.query(`DROP DATABASE IF EXISTS "${kept}" WITH (FORCE)`);
        await admin.end();
      }
      // The summary wraps its lines at a width, so where a line breaks depends on the
      // pids' digits: match on the text with every run of whitespace made one space.
      const flat = run.stdout.replace(/\s+/g, ' ');
      expect(flat).toMatch(
        /worker pid \d+ SIGKILLed after \d+ sagas finished; pid \d+ took its place/,
      );
      expect(run.stdout).toContain('PASS  every saga still ended completed or compensated');
      expect(run.stdout).toMatch(/40 of 40 finished: \d+ completed · \d+ compensated · 0 failed/);
      expect(run.stdout).not.toContain('FAIL');
    },
  );
});
