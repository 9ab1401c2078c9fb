import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../../test/support/db.js';
import { runInProcess } from './run-cli.js';

const db = await useTestDatabase();
const env = { DATABASE_URL: db.url };

// Every command that ends on its own (`worker` runs until stopped), with its flags, and junk.
const commands = fc.constantFrom(
  ['jobs', 'list'],
  ['jobs', 'show'],
  ['jobs', 'show', '987654321'],
  ['jobs', 'retry', '987654321'],
  ['sagas', 'show', 'no-such-saga'],
  ['jobs', 'cancel'],
  ['jobs', 'retry'],
  ['sagas', 'list'],
  ['sagas', 'show'],
  ['stats'],
  ['migrate'],
  ['jobs'],
  ['sagas'],
  ['nope'],
  [],
);
const flag = fc.constantFrom(
  '--json',
  '--status',
  '--queue',
  '--type',
  '--worker',
  '--limit',
  '--before-id',
  '--name',
  '--cursor',
  '--help',
  '--database-url',
  '--bogus',
  '-x',
  '--',
);
const value = fc.oneof(
  fc.string({ maxLength: 12 }),
  fc.string({ unit: 'binary', maxLength: 8 }),
  fc.integer().map(String),
  fc.constantFrom('0', '-1', '1e3', '99999999999999999999', 'dead', 'pending,dead', ''),
);
const argv = fc
  .tuple(commands, fc.array(fc.oneof(flag, value), { maxLength: 6 }))
  .map(([command, rest]) => [...command, ...rest]);

describe('property: the CLI answers any arguments with an exit code and a line, never a crash', () => {
  it('exits 0, 1 or 2; failures are one line without a stack; --json output parses', async () => {
    const before = await db.pool.query('SELECT count(*)::int AS n FROM skiplock.jobs');
    const seen = new Set<number>();
    await fc.assert(
      fc.asyncProperty(argv, async (args) => {
        const run = await runInProcess(args, env);
        seen.add(run.code ?? -1);
        expect([0, 1, 2], `${JSON.stringify(args)}: ${run.stderr}`).toContain(run.code);
        expect(run.stderr, JSON.stringify(args)).not.toMatch(/^\s+at /m);
        if (run.code !== 0 && run.code !== 2) {
          expect(run.stderr.trim().split('\n').length, run.stderr).toBeLessThanOrEqual(2);
        }
        if (run.code === 0 && args.includes('--json') && !args.includes('--help')) {
          expect(() => JSON.parse(run.stdout) as unknown, run.stdout).not.toThrow();
        }
      }),
      { numRuns: 150 },
    );
    // The generator reaches every outcome: successes, refusals of values and usage errors.
    expect([...seen].sort()).toEqual([0, 1, 2]);
    // Reads and refusals only: no job was added or removed.
    const after = await db.pool.query('SELECT count(*)::int AS n FROM skiplock.jobs');
    expect(after.rows).toEqual(before.rows);
  });
});
