import { createDatabase, dropDatabase, withDatabaseName } from '@skiplock/devdb';
import { createClient, createWorker, defineJob } from '@skiplock/queue';
import { createRelay, publish } from '@skiplock/outbox';
import { createSagaRuntime, defineSaga, migrate } from '@skiplock/saga';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import { waitFor } from '../../../test/support/wait.js';
import { runCli, runInProcess } from './run-cli.js';

// Real roles on a real server, in a database of their own. Roles are cluster-wide, so their names
// are unique to this run, and they are dropped (after the database that holds their grants and
// objects) whatever happens, leaving the server as it was found.
const adminUrl = inject('adminUrl');
const suffix = randomBytes(4).toString('hex');
const roles = {
  owner: `skiplock_t${suffix}_owner`,
  worker: `skiplock_t${suffix}_worker`,
  producer: `skiplock_t${suffix}_producer`,
};
const dbName = `${inject('runPrefix')}roles_${suffix}`;
const dbUrl = withDatabaseName(adminUrl, dbName);
// A database migrated before the roles existed, by the admin: the roles adopt it.
const oldName = `${dbName}_old`;
const oldUrl = withDatabaseName(adminUrl, oldName);
// The embedded server checks passwords on TCP connections; trust auth ignores them.
const password = randomBytes(12).toString('hex');
const urlAs = (role: string) => {
  const url = new URL(dbUrl);
  url.username = role;
  url.password = password;
  return url.toString();
};

const silent = pino({ level: 'silent' });
const pools: pg.Pool[] = [];
const poolAs = (role: string) => {
  const pool = new pg.Pool({ connectionString: urlAs(role), max: 4 });
  pool.on('error', () => {}); // a connection the database's drop ends is no uncaught error
  pools.push(pool);
  return pool;
};

async function admin(sql: string, url = adminUrl) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await client.query(sql);
  } finally {
    await client.end();
  }
}

const created: string[] = [];
afterAll(async () => {
  await Promise.all(pools.splice(0).map((p) => p.end().catch(() => {})));
  // pool.end() resolves before its clients' sockets have closed: dropping a database then
  // terminates a backend whose client is still saying goodbye, which surfaced once in CI as an
  // unhandled 57P01. Wait for this file's roles to have no backends left first.
  const names = Object.values(roles)
    .map((r) => `'${r}'`)
    .join(', ');
  await waitFor(
    async () =>
      (await admin(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE usename IN (${names})`))
        .rows[0].n === 0 || null,
    { what: "the roles' connections to close", timeoutMs: 10_000 },
  ).catch(() => {});
  try {
    for (const name of created) await dropDatabase(adminUrl, name);
  } finally {
    for (const role of Object.values(roles)) await admin(`DROP ROLE IF EXISTS "${role}"`);
  }
});

const ran: string[] = [];
const sendMail = defineJob({
  type: 'roles-send-mail',
  payload: z.object({ to: z.string() }),
  handler: ({ to }) => void ran.push(to),
});
const order = defineSaga({ name: 'roles-order', version: 1, input: z.object({ n: z.number() }) })
  .step('reserve', { run: (ctx) => ({ reserved: ctx.input.n }) })
  .waitFor('paid', { payload: z.object({ cents: z.number() }) })
  .step('ship', { run: () => ({ shipped: true }) });

/** Runs `work` and expects PostgreSQL to refuse it for lack of privilege (42501). */
async function denied(work: () => Promise<unknown>) {
  await expect(work()).rejects.toMatchObject({ code: '42501' });
}

describe('skiplock roles', () => {
  it('prints the SQL without a database, and refuses names that are not simple identifiers', async () => {
    const printed = await runInProcess(
      [
        'roles',
        '--owner',
        'app_owner',
        '--worker',
        'app_worker',
        '--producer',
        'app_producer',
        '--print',
      ],
      { DATABASE_URL: undefined },
    );
    expect(printed.code, printed.stderr).toBe(0);
    expect(printed.stdout).toContain(
      'CREATE SCHEMA IF NOT EXISTS skiplock AUTHORIZATION "app_owner"',
    );
    expect(printed.stdout).toContain('GRANT SELECT, INSERT ON skiplock.jobs TO "app_producer"');
    expect(printed.stdout).toContain('ON skiplock.saga_signals TO "app_producer"');
    expect(printed.stdout).not.toMatch(/UPDATE[^;\n]*ON skiplock\.jobs TO "app_producer"/);

    for (const bad of [
      'Owner',
      'a-b',
      'x"; DROP TABLE y; --',
      'pg_owner',
      '1abc',
      'a'.repeat(64),
    ]) {
      const r = await runInProcess(
        ['roles', '--owner', bad, '--worker', 'w', '--producer', 'p', '--print'],
        {},
      );
      expect(r.code, bad).toBe(2);
      expect(r.stderr).toContain('owner role');
      expect(r.stdout).toBe('');
    }
    const same = await runInProcess(
      ['roles', '--owner', 'o', '--worker', 'o', '--producer', 'p', '--print'],
      {},
    );
    expect(same.code).toBe(2);
    expect(same.stderr).toContain('three different roles');
    const missing = await runInProcess(['roles', '--owner', 'o', '--worker', 'w'], {});
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('missing --producer');
  });

  it('runs a worker and a producer under their roles, each limited to its own work', async () => {
    await createDatabase(adminUrl, dbName);
    created.push(dbName);
    const args = ['roles', '--owner', roles.owner, '--worker', roles.worker];
    const applied = await runCli([...args, '--producer', roles.producer], { DATABASE_URL: dbUrl });
    expect(applied.code, applied.stderr).toBe(0);
    for (const role of Object.values(roles)) {
      await admin(`ALTER ROLE "${role}" PASSWORD '${password}'`);
    }

    // The owner migrates; then the script runs again (as after every upgrade) for the new tables.
    const result = await migrate({ connectionString: urlAs(roles.owner), logger: silent });
    expect(result.applied.length).toBeGreaterThan(0);
    const again = await runInProcess([...args, '--producer', roles.producer], {
      DATABASE_URL: dbUrl,
    });
    expect(again.code, again.stderr).toBe(0);
    const owners = await admin(
      `SELECT DISTINCT pg_get_userbyid(relowner) AS owner FROM pg_class
       WHERE relnamespace = 'skiplock'::regnamespace`,
      dbUrl,
    );
    expect(owners.rows).toEqual([{ owner: roles.owner }]);

    // The producer enqueues (an idempotency key twice), starts a saga and reads both.
    const producerPool = poolAs(roles.producer);
    const producer = createClient({ pool: producerPool, logger: silent });
    const first = await producer.enqueue(
      sendMail,
      { to: 'a@example.com' },
      { idempotencyKey: 'k1' },
    );
    const second = await producer.enqueue(
      sendMail,
      { to: 'a@example.com' },
      { idempotencyKey: 'k1' },
    );
    expect(second).toMatchObject({ id: first.id, inserted: false });
    await producer.enqueueMany(sendMail, [{ payload: { to: 'b@example.com' } }]);
    expect((await producer.getJob(first.id))?.status).toBe('pending');
    expect((await producer.listJobs()).length).toBeGreaterThanOrEqual(2);
    expect((await producer.stats()).length).toBeGreaterThan(0);
    const producerSagas = createSagaRuntime({ pool: producerPool, sagas: [order], logger: silent });
    expect(await producerSagas.start(order, { id: 'o1', input: { n: 3 } })).toMatchObject({
      started: true,
    });
    expect((await producerSagas.getSaga('o1'))?.status).toBe('running');
    expect((await producerSagas.listSagas()).sagas.map((s) => s.id)).toEqual(['o1']);

    // It cannot claim, complete, update or delete a job, nor remove a saga.
    const claimer = createWorker({
      pool: producerPool,
      jobs: [sendMail],
      logger: silent,
      sweeper: false,
      retention: false,
    });
    await denied(() => claimer.runOnce());
    // runOnce() opened the worker's LISTEN connection; stop() closes it.
    await claimer.stop();
    await denied(() =>
      producerPool.query(`SELECT id FROM skiplock.jobs FOR UPDATE SKIP LOCKED LIMIT 1`),
    );
    await denied(() =>
      producerPool.query(`UPDATE skiplock.jobs SET status = 'completed' WHERE id = $1`, [first.id]),
    );
    await denied(() => producerPool.query(`DELETE FROM skiplock.jobs WHERE id = $1`, [first.id]));
    await denied(() => producerPool.query(`TRUNCATE skiplock.jobs`));
    await denied(() => producerPool.query(`DELETE FROM skiplock.sagas`));
    expect((await producer.getJob(first.id))?.status).toBe('pending');

    // The worker runs the jobs and the saga's steps under its role.
    const workerPool = poolAs(roles.worker);
    const workerSagas = createSagaRuntime({ pool: workerPool, sagas: [order], logger: silent });
    const worker = createWorker({
      pool: workerPool,
      jobs: [sendMail, ...workerSagas.jobs],
      logger: silent,
      pollIntervalMs: 20,
      sweeper: false,
      retention: { completedAgeMs: 0, intervalMs: 86_400_000 },
    });
    await worker.start();
    try {
      await waitFor(async () => (await producer.getJob(first.id))?.status === 'completed', {
        what: 'the job to complete',
      });
      expect(ran.sort()).toEqual(['a@example.com', 'b@example.com']);
      await waitFor(async () => (await producerSagas.getSaga('o1'))?.status === 'waiting', {
        what: 'the saga to wait for its signal',
      });

      // The producer signals the waiting saga, which resumes in the producer's transaction.
      expect(await producerSagas.signal('o1', 'paid', { cents: 300 })).toEqual({
        delivered: true,
        resumed: true,
      });
      const done = await waitFor(async () => {
        const saga = await producerSagas.getSaga('o1');
        return saga?.status === 'completed' ? saga : null;
      });
      expect(done.history.map((h) => `${h.step}:${h.status}`)).toEqual([
        'reserve:completed',
        'paid:completed',
        'ship:completed',
      ]);

      // Its singleton passes work too: the sweep, retention's deletes, the saga reconciler.
      await expect(worker.heartbeat()).resolves.toBeTruthy();
      await expect(createSweeperPass(workerPool)).resolves.toBeUndefined();
      expect((await worker.retention!.runOnce()).deleted).toBeGreaterThan(0);
      await expect(workerSagas.reconciler.runOnce()).resolves.toMatchObject({ ran: true });
    } finally {
      await worker.stop({ timeoutMs: 1_000 });
      await workerSagas.close();
      await producerSagas.close();
      await producer.close();
    }

    // The worker cannot change the schema, nor the migrations' records.
    await denied(() => workerPool.query(`CREATE TABLE skiplock.x (id int)`));
    await denied(() => workerPool.query(`ALTER TABLE skiplock.jobs ADD COLUMN x int`));
    await denied(() => workerPool.query(`DROP TABLE skiplock.saga_signals`));
    await denied(() => workerPool.query(`CREATE INDEX ON skiplock.jobs (queue)`));
    await denied(() => workerPool.query(`DELETE FROM skiplock.migrations`));
    await denied(() => producerPool.query(`CREATE TABLE skiplock.x (id int)`));
  });
});

describe('skiplock roles --migrate on a database migrated by another role', () => {
  it('hands the schema and its objects to the owner, migrates as the owner and grants', async () => {
    await createDatabase(adminUrl, oldName);
    created.push(oldName);
    await migrate({ connectionString: oldUrl, logger: silent });
    const run = await runInProcess(
      [
        'roles',
        '--owner',
        roles.owner,
        '--worker',
        roles.worker,
        '--producer',
        roles.producer,
        '--migrate',
        '--database-url',
        oldUrl,
      ],
      {},
    );
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain('skiplock schema was already up to date');
    const owners = await admin(
      `SELECT pg_get_userbyid(nspowner) AS owner FROM pg_namespace WHERE nspname = 'skiplock'
       UNION SELECT pg_get_userbyid(relowner) FROM pg_class
       WHERE relnamespace = 'skiplock'::regnamespace
       UNION SELECT pg_get_userbyid(typowner) FROM pg_type
       WHERE typnamespace = 'skiplock'::regnamespace
       UNION SELECT pg_get_userbyid(proowner) FROM pg_proc
       WHERE pronamespace = 'skiplock'::regnamespace
       UNION SELECT pg_get_userbyid(stxowner) FROM pg_statistic_ext
       WHERE stxnamespace = 'skiplock'::regnamespace`,
      oldUrl,
    );
    // Extended statistics (jobs_queue_status) too: before, they stayed the admin's.
    expect(owners.rows).toEqual([{ owner: roles.owner }]);
    // Passwords were set by the first test (this file's tests run in order).
    const producerUrl = new URL(urlAs(roles.producer));
    producerUrl.pathname = `/${oldName}`;
    const pool = new pg.Pool({ connectionString: producerUrl.toString(), max: 1 });
    pool.on('error', () => {});
    pools.push(pool);
    const producer = createClient({ pool, logger: silent });
    const { id } = await producer.enqueue(sendMail, { to: 'c@example.com' });
    await denied(() => pool.query(`DELETE FROM skiplock.jobs WHERE id = $1`, [id]));
    await producer.close();
    // Tables made before the roles get no default privileges: the worker's grants are explicit.
    // Before, it could not remove a schedule (`skiplock schedules remove`) in such a database.
    const privileges = await admin(
      `SELECT has_table_privilege('${roles.worker}', 'skiplock.schedules', 'DELETE') AS worker,
              has_table_privilege('${roles.producer}', 'skiplock.schedules', 'DELETE') AS producer`,
      oldUrl,
    );
    expect(privileges.rows).toEqual([{ worker: true, producer: false }]);
  });

  it('with --outbox grants the outbox: the producer publishes, the worker relays', async () => {
    const args = ['roles', '--owner', roles.owner, '--worker', roles.worker];
    const run = await runInProcess(
      [...args, '--producer', roles.producer, '--outbox', '--migrate'],
      {
        DATABASE_URL: dbUrl,
      },
    );
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/applied \d+ migration\(s\) as /);
    const printed = await runInProcess(
      [...args, '--producer', roles.producer, '--outbox', '--print'],
      {},
    );
    expect(printed.stdout).toContain(`ON skiplock.outbox_messages TO "${roles.producer}"`);
    // Before: no grant on the outbox at all; the producer's publish failed with 42501.
    const producerPool = poolAs(roles.producer);
    const id = await publish(producerPool, { topic: 'roles.test', key: 'k', payload: { n: 1 } });
    await denied(() => producerPool.query(`UPDATE skiplock.outbox_messages SET attempts = 0`));
    await denied(() => producerPool.query(`DELETE FROM skiplock.outbox_messages`));
    const sent: string[] = [];
    const relay = createRelay({
      pool: poolAs(roles.worker),
      logger: silent,
      topics: ['roles.test'],
      sink: {
        name: 'collect',
        deliver: async (messages) =>
          messages.map((m) => {
            sent.push(m.id);
            return { ok: true as const };
          }),
        close: async () => {},
      },
    });
    try {
      expect(await relay.runOnce()).toMatchObject({ delivered: 1 });
    } finally {
      await relay.stop();
    }
    expect(sent).toEqual([id]);
  });

  it('says the connection was lost when its backend is terminated mid-grant, without a crash', async () => {
    const cutName = `${dbName}_cut`;
    const cutUrl = withDatabaseName(adminUrl, cutName);
    await createDatabase(adminUrl, cutName);
    created.push(cutName);
    await migrate({ connectionString: cutUrl, logger: silent });
    // Holds the grants up: the roles command waits for this lock until its backend is terminated.
    const holder = new pg.Client({ connectionString: cutUrl });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE skiplock.jobs IN ACCESS EXCLUSIVE MODE');
      const running = runCli(
        [
          'roles',
          '--owner',
          roles.owner,
          '--worker',
          roles.worker,
          '--producer',
          roles.producer,
          '--database-url',
          cutUrl,
        ],
        {},
      );
      await waitFor(
        async () =>
          (
            await admin(
              `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
               WHERE datname = '${cutName}' AND application_name = 'skiplock-roles'
                 AND wait_event_type = 'Lock'`,
            )
          ).rowCount === 1,
        { what: 'the roles command waiting for the lock' },
      );
      const run = await running;
      // Before: the checked-out connection had no error listener, and the process died of an
      // unhandled 'error' event, with its stack trace, instead of saying what failed.
      expect(run.code).toBe(1);
      expect(run.stderr).not.toContain("Unhandled 'error' event");
      expect(run.stderr).not.toMatch(/^\s+at /m);
      expect(run.stderr).toMatch(/terminat/i);
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      await holder.end();
    }
  });
});

/** One sweep pass with a worker of its own, on `pool`; resolves when the pass ran. */
async function createSweeperPass(pool: pg.Pool): Promise<void> {
  const sweeping = createWorker({ pool, jobs: [sendMail], logger: silent, retention: false });
  try {
    await sweeping.sweeper!.runOnce();
  } finally {
    await sweeping.stop({ timeoutMs: 100 });
  }
}
