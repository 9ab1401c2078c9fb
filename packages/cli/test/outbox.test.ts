import { createDatabase, dropDatabase, withDatabaseName } from '@skiplock/devdb';
import { createRelay, publishMany, type Sink } from '@skiplock/outbox';
import { randomBytes } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { useTestDatabase } from '../../../test/support/db.js';
import { CliError } from '../src/args.js';
import { importOptional } from '../src/load-outbox.js';
import { runCli, runInProcess } from './run-cli.js';

const db = await useTestDatabase();
const env = { DATABASE_URL: db.url };

// A database without any skiplock table, for the outbox's missing-table message and migrate.
const adminUrl = inject('adminUrl');
const emptyName = `${inject('runPrefix')}cli_outbox_${randomBytes(4).toString('hex')}`;
await createDatabase(adminUrl, emptyName);
const emptyUrl = withDatabaseName(adminUrl, emptyName);
afterAll(() => dropDatabase(adminUrl, emptyName));

/** A sink whose receiver refuses topic `refused` for good (as a webhook answering 400 would). */
const refusing: Sink = {
  name: 'refusing',
  deliver: (messages) =>
    Promise.resolve(
      messages.map((m) =>
        m.topic === 'refused'
          ? { ok: false as const, error: 'receiver said 400 Bad Request', permanent: true }
          : { ok: true as const },
      ),
    ),
  close: () => Promise.resolve(),
};

async function statuses(ids: readonly string[]) {
  const { rows } = await db.pool.query<{ id: string; status: string; attempts: number }>(
    `SELECT id::text, status::text, attempts FROM skiplock.outbox_messages
     WHERE id = ANY($1::bigint[]) ORDER BY id`,
    [ids],
  );
  return rows;
}

describe('skiplock outbox', () => {
  it('shows counts and dead messages with their reason, pages them, and revives them', async () => {
    const [first, behind, loose] = await publishMany(db.pool, [
      { topic: 'refused', key: 'order-1', payload: { secret: 'not-for-the-terminal' } },
      { topic: 'accepted', key: 'order-1', payload: {} },
      { topic: 'refused', key: null, payload: {} },
    ]);
    const relay = createRelay({ pool: db.pool, sink: refusing, logger: pino({ level: 'silent' }) });
    for (let pass = 0; pass < 5; pass += 1) await relay.runOnce();
    expect((await statuses([first!, behind!, loose!])).map((r) => r.status)).toEqual([
      'dead',
      'delivered',
      'dead',
    ]);

    const stats = await runInProcess(['outbox', 'stats', '--json'], env);
    expect(stats.code, stats.stderr).toBe(0);
    expect(JSON.parse(stats.stdout)).toEqual({
      pending: 0,
      delivered: 1,
      dead: 2,
      oldestPendingMs: null,
      pendingByTopic: { topics: [], others: null, atLeast: false },
    });
    // Through the real entry point once; the rest in process.
    const table = await runCli(['outbox', 'stats'], env);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/dead\s+2/);
    expect(table.stdout).toMatch(/delivered\s+1/);

    const dead = await runInProcess(['outbox', 'dead'], env);
    expect(dead.code, dead.stderr).toBe(0);
    expect(dead.stdout).toMatch(new RegExp(`${loose}\\s+refused\\s+-\\s+1\\s`));
    expect(dead.stdout).toMatch(new RegExp(`${first}\\s+refused\\s+order-1\\s+1\\s`));
    expect(dead.stdout).toContain('receiver said 400 Bad Request');
    // Never the payload.
    expect(dead.stdout).not.toContain('not-for-the-terminal');
    expect(dead.stdout.indexOf(loose!)).toBeLessThan(dead.stdout.indexOf(first!));

    const page = await runInProcess(['outbox', 'dead', '--limit', '1', '--json'], env);
    const one = JSON.parse(page.stdout) as { messages: { id: string }[]; nextBeforeId: string };
    expect(one.messages.map((m) => m.id)).toEqual([loose]);
    expect(one.nextBeforeId).toBe(loose);
    const rest = await runInProcess(
      ['outbox', 'dead', '--before-id', one.nextBeforeId, '--json'],
      env,
    );
    const older = JSON.parse(rest.stdout) as { messages: Record<string, unknown>[] };
    expect(older.messages).toEqual([
      expect.objectContaining({
        id: first,
        topic: 'refused',
        key: 'order-1',
        attempts: 1,
        lastError: 'receiver said 400 Bad Request',
      }),
    ]);

    // One dead and one delivered: the dead one is revived, the other named, exit 1.
    const retried = await runInProcess(['outbox', 'retry', first!, behind!], env);
    expect(retried.code).toBe(1);
    expect(retried.stdout).toBe(`revived 1 message(s), pending again: ${first}\n`);
    expect(retried.stderr).toContain(`not revived: ${behind}`);
    expect(await statuses([first!, behind!])).toEqual([
      { id: first, status: 'pending', attempts: 0 },
      { id: behind, status: 'delivered', attempts: 1 },
    ]);
    const json = await runInProcess(['outbox', 'retry', loose!, '--json'], env);
    expect(json.code, json.stderr).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual({ revived: [loose], notRevived: [] });
    expect((await statuses([loose!]))[0]?.status).toBe('pending');
    // Exit 1 says why on stderr, with --json too; stdout stays JSON.
    const jsonLeft = await runInProcess(['outbox', 'retry', behind!, '--json'], env);
    expect(jsonLeft.code).toBe(1);
    expect(JSON.parse(jsonLeft.stdout)).toEqual({ revived: [], notRevived: [behind] });
    expect(jsonLeft.stderr).toContain(`not revived: ${behind}`);
    // Both revived ones wait for a relay now: counted pending, with an age.
    const after = JSON.parse((await runInProcess(['outbox', 'stats', '--json'], env)).stdout) as {
      pending: number;
      dead: number;
      oldestPendingMs: number | null;
    };
    expect(after).toMatchObject({ pending: 2, dead: 0 });
    expect(after.oldestPendingMs).toBeGreaterThanOrEqual(0);
    expect((await runInProcess(['outbox', 'dead'], env)).stdout).toBe('no dead messages\n');
    expect((await runInProcess(['outbox', 'dead', '--before-id', first!], env)).stdout).toBe(
      `no dead messages before ${first}\n`,
    );
    await relay.stop();
  });

  it('names the topic no relay serves, whose message holds its key on another topic, and kills it', async () => {
    // The audit's case: key order spans topics, and no relay serves `retired.topic`.
    const [retired, held, other] = await publishMany(db.pool, [
      { topic: 'retired.topic', key: 'order-9', payload: { n: 1 } },
      { topic: 'orders', key: 'order-9', payload: { n: 2 } },
      { topic: 'orders', key: 'order-10', payload: { n: 3 } },
    ]);
    const relay = createRelay({
      pool: db.pool,
      sink: refusing,
      logger: pino({ level: 'silent' }),
      topics: ['orders'],
    });
    for (let pass = 0; pass < 3; pass += 1) await relay.runOnce();
    await relay.retainOnce();
    expect((await statuses([retired!, held!, other!])).map((r) => r.status)).toEqual([
      'pending',
      'pending',
      'delivered',
    ]);

    const table = await runInProcess(['outbox', 'stats'], env);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toContain('pending by topic, oldest first:');
    expect(table.stdout).toMatch(
      new RegExp(`retired\\.topic\\s+1\\s+\\S+\\s+${retired}\\s+order-9`),
    );
    expect(table.stdout).toMatch(new RegExp(`orders\\s+1\\s+\\S+\\s+${held}\\s+order-9`));
    expect(table.stdout.indexOf('retired.topic')).toBeLessThan(table.stdout.indexOf('orders'));
    const json = JSON.parse((await runInProcess(['outbox', 'stats', '--json'], env)).stdout) as {
      pendingByTopic: { topics: { topic: string; oldestId: string; oldestKey: string }[] };
    };
    // The first test left its revived messages of `refused` pending.
    const mine = json.pendingByTopic.topics.filter((t) => t.topic !== 'refused');
    expect(mine.map((t) => [t.topic, t.oldestId, t.oldestKey])).toEqual([
      ['retired.topic', retired, 'order-9'],
      ['orders', held, 'order-9'],
    ]);

    // One pending, one delivered, one that does not exist: the first is killed, the rest named.
    const killed = await runInProcess(
      ['outbox', 'kill', retired!, other!, '99999999', '--reason', 'topic retired'],
      env,
    );
    expect(killed.code).toBe(1);
    expect(killed.stdout).toMatch(new RegExp(`${retired}\\s+retired\\.topic\\s+order-9`));
    expect(killed.stderr).toContain(`not killed: ${other}, 99999999 (not pending`);
    const dead = await runInProcess(['outbox', 'dead', '--json'], env);
    expect(JSON.parse(dead.stdout).messages).toEqual([
      expect.objectContaining({ id: retired, lastError: 'killed by an operator: topic retired' }),
    ]);
    // The key goes on: its message on `orders` is delivered.
    await relay.runOnce();
    expect((await statuses([held!]))[0]?.status).toBe('delivered');

    // Killed again after a retry, with --json: exit 0, no reason given.
    expect((await runInProcess(['outbox', 'retry', retired!], env)).code).toBe(0);
    const again = await runInProcess(['outbox', 'kill', retired!, '--json'], env);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toEqual({
      killed: [{ id: retired, topic: 'retired.topic', key: 'order-9' }],
      notKilled: [],
    });
    const left = await runInProcess(['outbox', 'kill', retired!, '--json'], env);
    expect(left.code).toBe(1);
    expect(JSON.parse(left.stdout)).toEqual({ killed: [], notKilled: [retired] });
    expect(left.stderr).toContain(`not killed: ${retired}`);
    await relay.stop();
  });

  it('refuses bad input with exit 2, naming what was wrong, and changes nothing', async () => {
    const cases: [string[], string][] = [
      [['outbox', 'retry'], 'missing <id>'],
      [['outbox', 'retry', '12x'], '<id> must be a message id (a positive integer), got "12x"'],
      [['outbox', 'retry', '0'], '<id> must be a message id'],
      [['outbox', 'dead', '--limit', '0'], '--limit must be an integer from 1 to 1000, got "0"'],
      [['outbox', 'dead', '--before-id', 'latest'], '--before-id must be a message id'],
      [['outbox', 'kill'], 'missing <id>'],
      [['outbox', 'kill', '1', '9223372036854775808'], '<id> must be a message id'],
      [['outbox', 'kill', '1', '--reason', 'x'.repeat(501)], '--reason is 501 characters, more'],
      [['outbox', 'stats', 'extra'], 'unexpected argument "extra"'],
      [['outbox', 'stats', '--verbose'], 'unknown option --verbose'],
    ];
    const counts = () =>
      db.pool.query(
        'SELECT status::text, count(*)::int AS n FROM skiplock.outbox_messages GROUP BY 1 ORDER BY 1',
      );
    const before = (await counts()).rows;
    for (const [args, message] of cases) {
      const result = await runInProcess(args, env);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toContain(message);
    }
    expect((await counts()).rows).toEqual(before);
  });

  it('says how to install the outbox where its table is missing, and migrate --outbox does', async () => {
    const missing = await runInProcess(['outbox', 'stats'], { DATABASE_URL: emptyUrl });
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain(`the outbox is not installed in database "${emptyName}"`);
    expect(missing.stderr).toContain('skiplock migrate --outbox');

    const plain = await runInProcess(['migrate'], { DATABASE_URL: emptyUrl });
    expect(plain.code, plain.stderr).toBe(0);
    expect((await runInProcess(['outbox', 'stats'], { DATABASE_URL: emptyUrl })).code).toBe(1);

    const migrated = await runCli(['migrate', '--outbox'], { DATABASE_URL: emptyUrl });
    expect(migrated.code, migrated.stderr).toBe(0);
    expect(migrated.stdout).toContain('outbox');
    const stats = await runInProcess(['outbox', 'stats', '--json'], { DATABASE_URL: emptyUrl });
    expect(stats.code, stats.stderr).toBe(0);
    expect(JSON.parse(stats.stdout)).toEqual({
      pending: 0,
      delivered: 0,
      dead: 0,
      oldestPendingMs: null,
      pendingByTopic: { topics: [], others: null, atLeast: false },
    });
  });

  it('says an optional package is not installed only when that package itself is missing', async () => {
    const absent = `@skiplock/not-installed-${randomBytes(4).toString('hex')}`;
    const load = () => import(absent) as Promise<unknown>;
    const refused = await importOptional(load, absent).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(CliError);
    expect((refused as Error).message).toBe(
      `${absent} is not installed beside @skiplock/cli; install it in this project to use the outbox (skiplock outbox, migrate --outbox)`,
    );
    // A package it needs, missing: the original error, not a wrong "not installed".
    const inner = await importOptional(load, '@skiplock/outbox').catch((error: unknown) => error);
    expect(inner).not.toBeInstanceOf(CliError);
    expect((inner as { code?: string }).code).toBe('ERR_MODULE_NOT_FOUND');
  });
});
