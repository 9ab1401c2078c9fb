import { createDatabase, dropDatabase, withDatabaseName } from '@skiplock/devdb';
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { useTestDatabase } from '../../../test/support/db.js';
import { closedPort, fixture, runCli } from './run-cli.js';

const db = await useTestDatabase();
const env = { DATABASE_URL: db.url };

// A database without the skiplock schema, for `migrate` and the missing-schema message.
const adminUrl = inject('adminUrl');
const emptyName = `skiplock_cli_empty_${randomBytes(4).toString('hex')}`;
await createDatabase(adminUrl, emptyName);
const emptyUrl = withDatabaseName(adminUrl, emptyName);
afterAll(() => dropDatabase(adminUrl, emptyName));

const commands = [
  'migrate',
  'worker',
  'stats',
  'jobs list',
  'jobs show',
  'jobs retry',
  'jobs cancel',
];

describe('command line', () => {
  it('prints the command list on --help and exits 2 with it when no command is given', async () => {
    const help = await runCli(['--help'], env);
    expect(help.code).toBe(0);
    for (const name of commands) expect(help.stdout).toContain(`  ${name} `);
    const none = await runCli([], env);
    expect(none.code).toBe(2);
    expect(none.stdout).toContain('usage: skiplock <command>');
  });

  it('has --help on every command', async () => {
    const results = await Promise.all(
      commands.map((c) => runCli([...c.split(' '), '--help'], env)),
    );
    results.forEach((r, i) => {
      expect(r.code, commands[i]).toBe(0);
      expect(r.stdout).toMatch(new RegExp(`^usage: skiplock ${commands[i]}`));
    });
    const group = await runCli(['jobs', '--help'], env);
    expect(group.code).toBe(0);
    expect(group.stdout).toContain('jobs cancel');
  });

  it('rejects unknown commands, subcommands and flags, naming them', async () => {
    const [command, sub, missingSub, flag] = await Promise.all([
      runCli(['frobnicate'], env),
      runCli(['jobs', 'explode'], env),
      runCli(['jobs'], env),
      runCli(['stats', '--verbose'], env),
    ]);
    expect(command.code).toBe(2);
    expect(command.stderr).toContain('unknown command "frobnicate"');
    expect(sub.code).toBe(2);
    expect(sub.stderr).toContain('unknown jobs subcommand "explode"');
    expect(missingSub.code).toBe(2);
    expect(missingSub.stderr).toContain('usage: skiplock jobs <subcommand>');
    expect(flag.code).toBe(2);
    expect(flag.stderr).toContain('unknown option --verbose');
  });

  it('rejects bad values with the flag and the value in the message', async () => {
    const cases: [string[], string][] = [
      [['jobs', 'list', '--limit', 'ten'], '--limit must be an integer from 1 to 1000, got "ten"'],
      [['jobs', 'list', '--limit', '0'], '--limit must be an integer from 1 to 1000, got "0"'],
      [['jobs', 'list', '--status', 'done'], '--status must be one of'],
      [['jobs', 'list', '--before-id', 'x1'], '--before-id must be a job id'],
      [['jobs', 'list', '--queue'], 'option --queue needs a value'],
      [['jobs', 'show'], 'missing <id>'],
      [['jobs', 'show', '12abc'], '<id> must be a job id (a positive integer), got "12abc"'],
      [['jobs', 'retry', '1', '2'], 'unexpected argument "2"'],
      [['stats', '--json=yes'], '--json'],
    ];
    const results = await Promise.all(cases.map(([args]) => runCli(args, env)));
    results.forEach((r, i) => {
      expect(r.code, cases[i]![0].join(' ')).toBe(2);
      expect(r.stderr).toContain(cases[i]![1]);
    });
  });

  it('says where the database is missing or unreachable, without a stack trace', async () => {
    const port = await closedPort();
    const [refused, noUrl, badUrl] = await Promise.all([
      runCli(['jobs', 'list', '--database-url', `postgres://postgres@127.0.0.1:${port}/x`], env),
      runCli(['stats'], { DATABASE_URL: undefined }),
      runCli(['stats'], { DATABASE_URL: 'mysql://secret@127.0.0.1/x' }),
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`127.0.0.1:${port}: connection refused`);
    expect(refused.stderr).not.toMatch(/\n\s+at /);
    expect(noUrl.code).toBe(2);
    expect(noUrl.stderr).toContain('pass --database-url or set DATABASE_URL');
    expect(badUrl.code).toBe(2);
    expect(badUrl.stderr).toContain('must be a postgres:// URL');
    expect(badUrl.stderr).not.toContain('secret');
  });

  it('names a database that does not exist', async () => {
    const url = withDatabaseName(adminUrl, 'skiplock_cli_no_such_db');
    const result = await runCli(['stats'], { DATABASE_URL: url });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('database "skiplock_cli_no_such_db" does not exist');
  });

  it('asks for `skiplock migrate` when the schema is missing, and migrate creates it', async () => {
    const before = await runCli(['stats'], { DATABASE_URL: emptyUrl });
    expect(before.code).toBe(1);
    expect(before.stderr).toContain(`the skiplock schema is missing in database "${emptyName}"`);
    expect(before.stderr).toContain('run `skiplock migrate` first');
    const worker = await runCli(['worker', fixture('default-array.ts')], {
      DATABASE_URL: emptyUrl,
    });
    expect(worker.code).toBe(1);
    expect(worker.stderr).toContain('run `skiplock migrate` first');

    // Two at once: the advisory lock serializes them and both succeed.
    const runs = await Promise.all([
      runCli(['migrate'], { DATABASE_URL: emptyUrl }),
      runCli(['migrate', '--database-url', emptyUrl], { DATABASE_URL: undefined }),
    ]);
    for (const run of runs) {
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout).toBe('skiplock schema is up to date\n');
    }
    const after = await runCli(['stats', '--json'], { DATABASE_URL: emptyUrl });
    expect(after.code, after.stderr).toBe(0);
    expect(JSON.parse(after.stdout)).toEqual({ stats: [] });
  });
});
