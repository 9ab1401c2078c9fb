import { describe, expect, inject, it } from 'vitest';
import { runDemo } from './run-demo.js';

describe('pnpm demo --kill-workers', () => {
  it(
    'SIGKILLs a worker mid-run and every saga still ends completed or compensated',
    { timeout: 120_000 },
    async () => {
      const run = await runDemo(['--count', '40', '--kill-workers'], {
        DATABASE_URL: inject('adminUrl'),
      });
      expect(run.code, run.stdout + run.stderr).toBe(0);
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
