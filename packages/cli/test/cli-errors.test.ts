import { createDatabase, dropDatabase, withDatabaseName } from '@skiplock/devdb';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { useTestDatabase } from '../../../test/support/db.js';
import { closedPort, fixture, runCli, runInProcess } from './run-cli.js';

const db = await useTestDatabase();
const env = { DATABASE_URL: db.url };

// A database without the skiplock schema, for `migrate` and the missing-schema message.
const adminUrl = inject('adminUrl');
const emptyName = `${inject('runPrefix')}cli_empty_${randomBytes(4).toString('hex')}`;
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
  'sagas list',
  'sagas show',
  'outbox stats',
  'outbox dead',
  'outbox retry',
];

describe('command line', () => {
  it('prints the command list on --help, and exits 2 with it when no command is given', async () => {
    const [help, none] = await Promise.all([runCli(['--help'], env), runCli([], env)]);
    expect(help.code).toBe(0);
    for (const name of commands) expect(help.stdout).toContain(`  ${name} `);
    expect(none.code).toBe(2);
    expect(none.stdout).toContain('usage: skiplock <command>');
  });

  it('has --help on every command and command group', async () => {
    for (const name of commands) {
      const r = await runInProcess([...name.split(' '), '--help'], env);
      expect(r.code, name).toBe(0);
      expect(r.stdout).toMatch(new RegExp(`^usage: skiplock ${name}`));
    }
    for (const group of ['jobs', 'sagas']) {
      const r = await runInProcess([group, '--help'], env);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(`${group} list`);
    }
  });

  it('prints its version, and help for a command given after help', async () => {
    const manifest = JSON.parse(
      readFileSync(new URL('../package.json', import.meta.url), 'utf8'),
    ) as { version: string };
    for (const flag of ['--version', '-V', 'version']) {
      const r = await runInProcess([flag], env);
      expect(r.code, flag).toBe(0);
      expect(r.stdout).toBe(`${manifest.version}\n`);
    }
    for (const name of ['jobs list', 'sagas cancel', 'stats', 'jobs']) {
      const viaHelp = await runInProcess(['help', ...name.split(' ')], env);
      const viaFlag = await runInProcess([...name.split(' '), '--help'], env);
      expect(viaHelp.code, name).toBe(0);
      expect(viaHelp.stdout, name).toBe(viaFlag.stdout);
      expect(viaHelp.stdout).toMatch(new RegExp(`^usage: skiplock ${name}`));
    }
    const unknown = await runInProcess(['help', 'frobnicate'], env);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('unknown command "frobnicate"');
  });

  it('suggests the command or subcommand a typo was probably meant to be', async () => {
    const cases: [string[], string][] = [
      [['job', 'list'], 'unknown command "job" (did you mean "jobs"?)'],
      [['stast'], 'unknown command "stast" (did you mean "stats"?)'],
      [['jobs', 'lsit'], 'unknown jobs subcommand "lsit" (did you mean "list"?)'],
      [['sagas', 'cancle'], 'unknown sagas subcommand "cancle" (did you mean "cancel"?)'],
    ];
    for (const [args, message] of cases) {
      const r = await runInProcess(args, env);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toContain(message);
    }
    // Nothing close: no suggestion.
    expect((await runInProcess(['frobnicate'], env)).stderr).not.toContain('did you mean');
  });

  it('rejects unknown commands, subcommands and flags, naming them', async () => {
    const cases: [string[], string][] = [
      [['frobnicate'], 'unknown command "frobnicate"'],
      [['jobs', 'explode'], 'unknown jobs subcommand "explode"'],
      [['sagas', 'delete'], 'unknown sagas subcommand "delete"'],
      [['jobs'], 'usage: skiplock jobs <subcommand>'],
      [['stats', '--verbose'], 'unknown option --verbose\n'],
      // A mistyped option is suggested, as a mistyped command is.
      [['dashboard', '--prot', '4612'], 'unknown option --prot (did you mean "--port"?)'],
      [['jobs', 'list', '--stauts', 'dead'], 'unknown option --stauts (did you mean "--status"?)'],
    ];
    for (const [args, message] of cases) {
      const r = await runInProcess(args, env);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toContain(message);
    }
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
      [['jobs', 'show', '9223372036854775808'], '<id> must be a job id'],
      [['jobs', 'cancel', '-5'], 'unknown option -5'],
      [['sagas', 'list', '--limit', '1001'], '--limit must be an integer from 1 to 1000'],
      [['sagas', 'show', 'has space'], '<id> must be 1-200 printable characters'],
      [['stats', '--json=yes'], '--json'],
      [['migrate', 'now'], 'unexpected argument "now"'],
      // Before: an empty filter was taken for none, and every queue's jobs were listed.
      [['jobs', 'list', '--queue', ''], '--queue must not be empty'],
      [['jobs', 'list', '--type', ' '], '--type must not be empty'],
      [['jobs', 'list', '--worker='], '--worker must not be empty'],
      [['jobs', 'list', '--status', 'failed', '--status', ''], '--status must not be empty'],
      [['sagas', 'list', '--name', ''], '--name must not be empty'],
      // Passed on, an empty host listened on every address.
      [['dashboard', '--host', ''], '--host must not be empty'],
    ];
    // An empty cursor is the first page, as a paging loop's first call passes it.
    const first = await runInProcess(['sagas', 'list', '--cursor', '', '--json'], env);
    expect(first.code, first.stderr).toBe(0);
    for (const [args, message] of cases) {
      const r = await runInProcess(args, env);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toContain(message);
      expect(r.stderr).toContain(`--help for details`);
    }
    // The same through the real binary: message on stderr, exit code 2.
    const real = await runCli(['jobs', 'list', '--limit', 'ten'], env);
    expect(real.code).toBe(2);
    expect(real.stderr).toContain('--limit must be an integer from 1 to 1000, got "ten"');
    expect(real.stdout).toBe('');
  });

  it('says where the database is unreachable, without a stack trace', async () => {
    const port = await closedPort();
    const refused = await runCli(
      ['jobs', 'list', '--database-url', `postgres://postgres@127.0.0.1:${port}/x`],
      env,
    );
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      `skiplock jobs list: cannot use PostgreSQL at 127.0.0.1:${port}: connection refused ` +
        '(is PostgreSQL running there?)\n',
    );
    for (const command of [
      ['stats'],
      ['migrate'],
      ['sagas', 'list'],
      ['worker', fixture('jobs-array.ts')],
    ]) {
      const r = await runInProcess(command, {
        DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/x`,
      });
      expect(r.code, command.join(' ')).toBe(1);
      expect(r.stderr).toContain(`127.0.0.1:${port}: connection refused`);
    }
  });

  it('needs a postgres URL, and never echoes it', async () => {
    const [noUrl, badUrl] = [
      await runInProcess(['stats'], { DATABASE_URL: undefined }),
      await runInProcess(['stats'], { DATABASE_URL: 'mysql://secret@127.0.0.1/x' }),
    ];
    expect(noUrl.code).toBe(2);
    expect(noUrl.stderr).toContain('pass --database-url or set DATABASE_URL');
    expect(badUrl.code).toBe(2);
    expect(badUrl.stderr).toContain('must be a postgres:// URL');
    expect(badUrl.stderr).not.toContain('secret');
    // A % that is no escape: before, a bare "URI malformed" (exit 1) from building the message.
    for (const [url, part] of [
      ['postgres://us%zzer:secret@127.0.0.1/x', 'user name'],
      ['postgres://user:sec%zzret@127.0.0.1/x', 'password'],
      ['postgres://user:secret@127.0.0.1/d%zzb', 'database name'],
    ] as const) {
      const bad = await runInProcess(['stats'], { DATABASE_URL: url });
      expect(bad.code, url).toBe(2);
      expect(bad.stderr).toContain(`its ${part} holds a % that is not a percent-escape`);
      expect(bad.stderr).not.toContain('secret');
    }
  });

  it('never echoes a password, whatever argument a database URL is given as', async () => {
    const url = 'postgres://ops:s3cret-pw@127.0.0.1:5432/prod';
    // Before: each refusal quoted the argument whole, password and all.
    for (const args of [['migrate', url], ['jobs', 'show', url], [url], ['stats', url]]) {
      const r = await runInProcess(args, env);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr, args.join(' ')).not.toContain('s3cret-pw');
      expect(r.stderr, args.join(' ')).toContain('postgres://ops:***@127.0.0.1:5432/prod');
    }
  });

  it('with --json, says a failure in JSON on stdout too, whatever the exit code', async () => {
    // Before: stdout was empty, and a script reading it as JSON failed on nothing.
    const missing = await runInProcess(['jobs', 'cancel', '999999999', '--json'], env);
    expect(missing.code).toBe(1);
    expect(JSON.parse(missing.stdout)).toEqual({
      error: { message: expect.stringContaining('999999999'), exitCode: 1 },
    });
    const usage = await runInProcess(['jobs', 'list', '--limit', 'ten', '--json'], env);
    expect(usage.code).toBe(2);
    expect(JSON.parse(usage.stdout)).toEqual({
      error: { message: '--limit must be an integer from 1 to 1000, got "ten"', exitCode: 2 },
    });
    const url = await runInProcess(['stats', 'postgres://ops:s3cret-pw@h/db', '--json'], env);
    expect(url.code).toBe(2);
    expect(url.stdout).not.toContain('s3cret-pw');
    expect(JSON.parse(url.stdout).error.message).toContain('postgres://ops:***@h/db');
  });

  it('gives up on a row another transaction holds after 5 s, changing nothing, and says why', async () => {
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO skiplock.jobs (queue, job_type, payload) VALUES ('held', 'held-job', '{}')
       RETURNING id::text`,
    );
    const id = rows[0]!.id;
    const holder = await db.pool.connect();
    try {
      // A job stuck in its completeWith holds its row so.
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM skiplock.jobs WHERE id = $1 FOR UPDATE', [id]);
      // Before: the command waited as long as the holder did.
      const r = await runInProcess(['jobs', 'cancel', id], env);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`job ${id} is held by another transaction`);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    const { rows: after } = await db.pool.query<{ status: string }>(
      'SELECT status::text FROM skiplock.jobs WHERE id = $1',
      [id],
    );
    expect(after[0]!.status).toBe('pending');
  });

  it('names a database that does not exist', async () => {
    const url = withDatabaseName(adminUrl, 'skiplock_cli_no_such_db');
    const result = await runInProcess(['stats'], { DATABASE_URL: url });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('database "skiplock_cli_no_such_db" does not exist');
  });

  it('asks for `skiplock migrate` when a table of a later migration is missing', async () => {
    await db.pool.query('DROP TABLE skiplock.saga_signals, skiplock.saga_steps, skiplock.sagas');
    const result = await runInProcess(['sagas', 'list'], env);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/the skiplock schema in database "\w+" at .* is out of date/);
    expect(result.stderr).toContain('run `skiplock migrate`');
  });

  it('asks for `skiplock migrate` when the schema is missing, and migrate creates it', async () => {
    const before = await runCli(['stats'], { DATABASE_URL: emptyUrl });
    expect(before.code).toBe(1);
    expect(before.stderr).toBe(
      `skiplock stats: the skiplock schema is missing in database "${emptyName}" at ` +
        `${new URL(emptyUrl).host}; run \`skiplock migrate\` first\n`,
    );
    const worker = await runInProcess(['worker', fixture('default-array.ts')], {
      DATABASE_URL: emptyUrl,
    });
    expect(worker.code).toBe(1);
    expect(worker.stderr).toContain('run `skiplock migrate` first');

    // Two at once: the advisory lock serializes them and both succeed.
    const runs = await Promise.all([
      runCli(['migrate'], { DATABASE_URL: emptyUrl }),
      runCli(['migrate', '--database-url', emptyUrl], { DATABASE_URL: undefined }),
    ]);
    for (const run of runs) expect(run.code, run.stderr).toBe(0);
    // Each migration set is applied under its own transaction-scoped lock, so the two may share
    // the work (one applies the queue's set while the other waits, then takes the next set
    // first): together they apply every migration exactly once, and each says which it applied.
    const applied = runs.flatMap((run) =>
      [...run.stdout.matchAll(/^ {2}(\S+)$/gm)].map((m) => m[1]),
    );
    expect(applied).toContain('queue/0000_init_jobs');
    expect(applied).toContain('queue-flow/0000_admission');
    expect(applied).toContain('saga/0000_saga_tables');
    expect(new Set(applied).size).toBe(applied.length);
    for (const run of runs) {
      expect(run.stdout).toMatch(
        /^(skiplock schema was already up to date\n|applied \d+ migration\(s\):\n[\s\S]*skiplock schema is up to date\n)$/,
      );
    }
    const after = await runInProcess(['stats', '--json'], { DATABASE_URL: emptyUrl });
    expect(after.code, after.stderr).toBe(0);
    expect(JSON.parse(after.stdout)).toEqual({ stats: [] });
  });
});
