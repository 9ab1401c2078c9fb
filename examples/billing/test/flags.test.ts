import { describe, expect, inject, it } from 'vitest';
import { FlagError, parseDemoFlags } from '../src/demo/flags.js';
import { runDemo } from './run-demo.js';

describe('demo flags', () => {
  it('has defaults for everything', () => {
    expect(parseDemoFlags([])).toEqual({
      count: 300,
      workers: 3,
      concurrency: 10,
      customers: 50,
      'decline-rate': 0.1,
      'transient-rate': 0.1,
      'late-confirm-rate': 0.1,
      'deadline-seconds': 300,
      'kill-workers': false,
      keep: false,
    });
  });

  it('reads every flag', () => {
    const flags = parseDemoFlags([
      '--count',
      '40',
      '--workers',
      '2',
      '--decline-rate',
      '0.25',
      '--transient-rate',
      '0',
      '--late-confirm-rate',
      '1',
      '--kill-workers',
      '--keep',
    ]);
    expect(flags).toMatchObject({
      count: 40,
      workers: 2,
      'decline-rate': 0.25,
      'transient-rate': 0,
      'late-confirm-rate': 1,
      'kill-workers': true,
      keep: true,
    });
  });

  it('returns null for --help', () => {
    expect(parseDemoFlags(['--help'])).toBeNull();
  });

  it.each([
    [['--count', 'abc'], '--count must be a whole number from 1 to 100000'],
    [['--count', '0'], '--count must be a whole number from 1 to 100000'],
    [['--count', '1.5'], '--count must be a whole number from 1 to 100000'],
    [['--count'], '--count needs a value'],
    [['--workers', '99'], '--workers must be a whole number from 1 to 16'],
    [['--decline-rate', '1.5'], '--decline-rate must be between 0 and 1'],
    [['--late-confirm-rate', '-0.1'], '--late-confirm-rate needs a value; for one starting with'],
    [['--late-confirm-rate=-0.1'], '--late-confirm-rate must be between 0 and 1'],
    [['--transient-rate', '0.95'], '--transient-rate must be between 0 and 0.9'],
    [['--kill-workers=yes'], '--kill-workers takes no value'],
    [['--bogus'], 'unknown flag --bogus'],
    [['300'], 'unexpected argument: 300'],
  ])('refuses %j: %s', (argv, message) => {
    expect(() => parseDemoFlags(argv)).toThrow(FlagError);
    expect(() => parseDemoFlags(argv)).toThrow(message);
  });

  it('exits 2 with a message naming the flag, before touching any database', async () => {
    const run = await runDemo(['--decline-rate', 'lots'], {
      DATABASE_URL: 'postgres://nowhere.invalid/x',
    });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('pnpm demo: --decline-rate must be a number between 0 and 1');
    expect(run.stderr).toContain('pnpm demo --help');
    expect(run.stdout).not.toContain('Billing demo');
  });

  it('prints its usage for --help and exits 0', async () => {
    const run = await runDemo(['--help']);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('Usage: pnpm demo [flags]');
    expect(run.stdout).toContain('--kill-workers');
  });

  it('exits 1 with a clear message when DATABASE_URL points nowhere', async () => {
    const run = await runDemo(['--count', '5'], {
      DATABASE_URL: 'postgres://postgres@127.0.0.1:1/postgres',
    });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('pnpm demo failed: cannot use the database');
    expect(run.stderr).toContain('check DATABASE_URL');
  });

  it('exits 1 with one line naming a DATABASE_URL role that does not exist', async () => {
    const url = new URL(inject('adminUrl'));
    // The admin URL's password stays: a server with password auth (the embedded one) answers
    // "password authentication failed" for an unknown role, one with trust "role does not exist".
    url.username = 'skiplock_no_such_role';
    const run = await runDemo(['--count', '5'], { DATABASE_URL: url.toString() });
    expect(run.code).toBe(1);
    const lines = run.stderr.split('\n').filter((l) => l.startsWith('pnpm demo'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^pnpm demo failed: (role "skiplock_no_such_role" does not exist; use an existing role in DATABASE_URL|cannot use the database \(password authentication failed for user "skiplock_no_such_role"\); check DATABASE_URL)/,
    );
    // No stack trace: no "    at f (file:line)" frames.
    expect(run.stderr).not.toMatch(/^\s+at /m);
  });

  it(
    'exits 1 and says so when sagas are still unfinished at the deadline',
    { timeout: 90_000 },
    async () => {
      // One worker running one job at a time cannot finish 2,000 sagas (16,000 jobs) in 5 s.
      const run = await runDemo(
        ['--count', '2000', '--workers', '1', '--concurrency', '1', '--deadline-seconds', '5'],
        { DATABASE_URL: inject('adminUrl') },
      );
      // stderr as the message: if the run ends another way, the failure says how.
      expect(run.code, run.stderr).toBe(1);
      expect(run.stdout, run.stderr).toMatch(/FAIL {2}.*sagas still unfinished at the deadline/);
    },
  );
});
