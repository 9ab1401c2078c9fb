import { createDatabase, dropDatabase, withDatabaseName } from '@skiplock/devdb';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate as drizzleMigrate } from 'drizzle-orm/node-postgres/migrator';
import { describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { migrate, queueMigrations } from '../src/index.js';
import { queueFlowMigrations } from '../src/migrate.js';
import { quiet } from './fixtures.js';

describe('migrate', () => {
  it('two processes migrating a fresh database at once both succeed, and the schema is applied once', async () => {
    const adminUrl = inject('adminUrl');
    const name = `${inject('runPrefix')}migrate_${randomBytes(4).toString('hex')}`;
    const url = await createDatabase(adminUrl, name);
    try {
      const results = await Promise.all([
        migrate({ connectionString: url, logger: quiet }),
        migrate({ connectionString: url, logger: quiet }),
        migrate({ connectionString: url, logger: quiet }),
      ]);
      // Each set is applied whole by one caller, and each migration once across callers (a set's
      // lock is its transaction's, so another caller may take the next set); the others find
      // none left.
      const applied = results.flatMap((r) => r.applied);
      expect(new Set(applied).size).toBe(applied.length);
      for (const r of results) {
        for (const set of ['queue/', 'queue-flow/']) {
          const mine = r.applied.filter((tag) => tag.startsWith(set));
          expect(
            mine.length === 0 || mine.length === applied.filter((t) => t.startsWith(set)).length,
          ).toBe(true);
        }
      }
      expect(applied.filter((t) => t.startsWith('queue/'))[0]).toBe('queue/0000_init_jobs');
      // The queue's two sets: the second applies after the first commits (it names the job status
      // the first adds, which PostgreSQL lets no statement use in the transaction that added it).
      expect(applied.every((tag) => /^queue(-flow)?\//.test(tag))).toBe(true);
      expect(applied.some((tag) => tag.startsWith('queue-flow/'))).toBe(true);
      // Running again is a no-op.
      const again = await migrate({
        connectionString: withDatabaseName(adminUrl, name),
        logger: quiet,
      });
      expect(again.applied).toEqual([]);
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      const { rows } = await client.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM skiplock.migrations',
      );
      const tables = await client.query(
        `SELECT 1 FROM information_schema.tables WHERE table_schema = 'skiplock' AND table_name = 'jobs'`,
      );
      const options = await client.query<{ reloptions: string[] }>(
        `SELECT reloptions FROM pg_class WHERE oid = 'skiplock.jobs'::regclass`,
      );
      // The queue installs its own tables only: the saga package migrates the saga tables.
      const sagaTables = await client.query(
        `SELECT 1 FROM information_schema.tables WHERE table_schema = 'skiplock' AND table_name LIKE 'saga%'`,
      );
      await client.end();
      expect(rows[0]!.n).toBe(applied.filter((t) => t.startsWith('queue/')).length);
      expect(tables.rowCount).toBe(1);
      expect(sagaTables.rowCount).toBe(0);
      // The queue table vacuums early (migration 0003): churn leaves dead rows behind fast.
      expect(options.rows[0]!.reloptions).toContain('autovacuum_vacuum_scale_factor=0.02');
    } finally {
      await dropDatabase(adminUrl, name);
    }
  });

  it('renames the retry-waiting status from failed to retryable in place, keeping such jobs claimable', async () => {
    const adminUrl = inject('adminUrl');
    const name = `${inject('runPrefix')}migrate_${randomBytes(4).toString('hex')}`;
    const url = await createDatabase(adminUrl, name);
    // The queue's migrations as they were before 0008, applied as a 0.0 install had them.
    const before = await mkdtemp(join(tmpdir(), 'skiplock-migrations-'));
    await cp(queueMigrations.folder, before, { recursive: true });
    const journalPath = join(before, 'meta', '_journal.json');
    const journal = JSON.parse(await readFile(journalPath, 'utf8')) as {
      entries: { tag: string }[];
    };
    journal.entries = journal.entries.filter((e) => e.tag < '0008');
    await writeFile(journalPath, JSON.stringify(journal));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await drizzleMigrate(drizzle(client), {
        migrationsFolder: before,
        migrationsSchema: 'skiplock',
        migrationsTable: 'migrations',
      });
      await client.query(
        `INSERT INTO skiplock.jobs (queue, job_type, payload, status, attempts, run_at)
         VALUES ('default', 'old', '{}', 'failed', 1, now())`,
      );
      const { applied } = await migrate({ connectionString: url, logger: quiet });
      expect(applied[0]).toBe('queue/0008_retryable_status');
      const { rows } = await client.query<{ status: string }>(
        'SELECT status::text FROM skiplock.jobs',
      );
      expect(rows).toEqual([{ status: 'retryable' }]);
      // Still claimable: the claim index's predicate follows the renamed value (usable at all,
      // since a one-row table would be scanned anyway).
      await client.query('SET enable_seqscan = off');
      const plan = await client.query<{ 'QUERY PLAN': string }>(
        `EXPLAIN SELECT id FROM skiplock.jobs WHERE status IN ('pending', 'retryable')
           AND lease_expires_at IS NULL AND queue = 'default' ORDER BY priority DESC, run_at, id`,
      );
      expect(plan.rows.map((r) => r['QUERY PLAN']).join('\n')).not.toContain('Seq Scan');
    } finally {
      await client.end();
      await rm(before, { recursive: true, force: true });
      await dropDatabase(adminUrl, name);
    }
  });

  it('0006 makes stopped runs hold their singletonRunning key, settling rows that already collide', async () => {
    const adminUrl = inject('adminUrl');
    const name = `${inject('runPrefix')}migrate_${randomBytes(4).toString('hex')}`;
    const url = await createDatabase(adminUrl, name);
    // The second set as it was before 0006.
    const before = await mkdtemp(join(tmpdir(), 'skiplock-migrations-'));
    await cp(queueFlowMigrations.folder, before, { recursive: true });
    const journalPath = join(before, 'meta', '_journal.json');
    const journal = JSON.parse(await readFile(journalPath, 'utf8')) as {
      entries: { tag: string }[];
    };
    journal.entries = journal.entries.filter((e) => e.tag < '0006');
    await writeFile(journalPath, JSON.stringify(journal));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const db = drizzle(client);
      for (const [folder, table] of [
        [queueMigrations.folder, queueMigrations.table],
        [before, queueFlowMigrations.table],
      ] as const) {
        await drizzleMigrate(db, {
          migrationsFolder: folder,
          migrationsSchema: 'skiplock',
          migrationsTable: table,
        });
      }
      // What the old index allowed: a stopped run (cancelled, keeping its lease) and a newer job
      // of its key beside it, running; two stopped runs of one key; one stopped run alone.
      const row = async (key: string, status: string) =>
        (
          await client.query<{ id: string }>(
            `INSERT INTO skiplock.jobs (queue, job_type, payload, status, attempts, locked_by,
               lease_expires_at, singleton_key, singleton_running)
             VALUES ('q', 't', '{}', $2, 1, 'w', now() + interval '1 hour', $1, true)
             RETURNING id::text AS id`,
            [key, status],
          )
        ).rows[0]!.id;
      const stoppedA = await row('a', 'cancelled');
      const runningA = await row('a', 'processing');
      const olderB = await row('b', 'cancelled');
      const newerB = await row('b', 'cancelled');
      const aloneC = await row('c', 'cancelled');

      const { applied } = await migrate({ connectionString: url, logger: quiet });
      expect(applied).toEqual(['queue-flow/0006_stopped_runs_hold_singleton_keys']);
      // The older stopped runs give up the key, and only it: they keep their lease.
      const { rows } = await client.query<{ id: string; key: string | null; leased: boolean }>(
        `SELECT id::text AS id, singleton_key AS key, lease_expires_at IS NOT NULL AS leased
         FROM skiplock.jobs ORDER BY id`,
      );
      expect(rows).toEqual([
        { id: stoppedA, key: null, leased: true },
        { id: runningA, key: 'a', leased: true },
        { id: olderB, key: null, leased: true },
        { id: newerB, key: 'b', leased: true },
        { id: aloneC, key: 'c', leased: true },
      ]);
      // The stopped run alone holds its key now.
      await expect(
        client.query(
          `INSERT INTO skiplock.jobs (queue, job_type, payload, singleton_key, singleton_running)
           VALUES ('q', 't', '{}', 'c', true)`,
        ),
      ).rejects.toThrow(/jobs_singleton_held_idx/);
    } finally {
      await client.end();
      await rm(before, { recursive: true, force: true });
      await dropDatabase(adminUrl, name);
    }
  });

  it("says which set failed and PostgreSQL's reason, and applies nothing of that set", async () => {
    const adminUrl = inject('adminUrl');
    const name = `${inject('runPrefix')}migrate_${randomBytes(4).toString('hex')}`;
    const url = await createDatabase(adminUrl, name);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      // Something of the same name is in the way of the first migration.
      await client.query(`CREATE SCHEMA skiplock; CREATE TYPE skiplock.job_status AS ENUM ('x')`);
      const error = await migrate({ connectionString: url, logger: quiet }).catch(
        (e: unknown) => e,
      );
      // Before: drizzle's "Failed query: CREATE TYPE ... params:", with no reason.
      expect(error).toMatchObject({
        code: '42710',
        message: expect.stringMatching(
          /^migrate: the queue migrations from 0000_init_jobs \(\d+ pending\) failed, none of them applied: type "job_status" already exists \(42710\)$/,
        ),
      });
      const { rows } = await client.query(`SELECT to_regclass('skiplock.jobs') AS t`);
      expect(rows[0].t).toBeNull();
    } finally {
      await client.end();
      await dropDatabase(adminUrl, name);
    }
  });

  it('needs no privilege to create when the schema is up to date', async () => {
    const adminUrl = inject('adminUrl');
    const name = `${inject('runPrefix')}migrate_${randomBytes(4).toString('hex')}`;
    const url = await createDatabase(adminUrl, name);
    const role = `skiplock_t_reader_${randomBytes(4).toString('hex')}`;
    // The embedded server checks passwords on TCP connections; trust auth ignores them.
    const password = randomBytes(12).toString('hex');
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      await migrate({ connectionString: url, logger: quiet });
      // A worker's kind of role: it may read the schema, not create in the database.
      await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD '${password}';
        REVOKE CREATE ON DATABASE "${name}" FROM PUBLIC;
        GRANT USAGE ON SCHEMA skiplock TO ${role};
        GRANT SELECT ON ALL TABLES IN SCHEMA skiplock TO ${role}`);
      const asRole = new URL(url);
      asRole.username = role;
      asRole.password = password;
      // Before: 42501 permission denied for database, from drizzle's CREATE SCHEMA IF NOT EXISTS.
      expect(await migrate({ connectionString: asRole.toString(), logger: quiet })).toEqual({
        applied: [],
      });
    } finally {
      await admin.query(`DROP OWNED BY ${role}; DROP ROLE ${role}`).catch(() => {});
      await admin.end();
      await dropDatabase(adminUrl, name);
    }
  });

  it('names the folder it cannot read instead of failing inside drizzle', async () => {
    const adminUrl = inject('adminUrl');
    const name = `${inject('runPrefix')}migrate_${randomBytes(4).toString('hex')}`;
    const url = await createDatabase(adminUrl, name);
    try {
      await expect(
        migrate({
          connectionString: url,
          logger: quiet,
          include: [
            { name: 'extra', folder: '/nonexistent/migrations', table: 'extra_migrations' },
          ],
        }),
      ).rejects.toThrow('migrate: cannot read the extra migrations in /nonexistent/migrations');
    } finally {
      await dropDatabase(adminUrl, name);
    }
  });
  it('says which migration failed when the connection is lost in the middle of it, and the pool migrates again after it', async () => {
    const adminUrl = inject('adminUrl');
    const name = `${inject('runPrefix')}migrate_${randomBytes(4).toString('hex')}`;
    const url = await createDatabase(adminUrl, name);
    const folder = await mkdtemp(join(tmpdir(), 'skiplock-migrations-'));
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    pool.on('error', () => {});
    try {
      // A set whose one migration runs until its backend is terminated.
      await cp(join(queueMigrations.folder, 'meta'), join(folder, 'meta'), { recursive: true });
      await writeFile(
        join(folder, 'meta', '_journal.json'),
        JSON.stringify({
          version: '7',
          dialect: 'postgresql',
          entries: [{ idx: 0, version: '7', when: 1, tag: '0000_slow', breakpoints: true }],
        }),
      );
      await writeFile(join(folder, '0000_slow.sql'), 'SELECT pg_sleep(60);');
      const slow = { name: 'slow', folder, table: 'slow_migrations' };
      const failed = migrate({ pool, logger: quiet, include: [slow] }).catch((e: unknown) => e);
      let terminated = false;
      for (let i = 0; i < 200 && !terminated; i += 1) {
        const { rows } = await admin.query(
          `SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity
            WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep(60)%'`,
        );
        terminated = rows.length > 0;
        if (!terminated) await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(terminated).toBe(true);
      // Before: the unlock's "Client has encountered a connection error and is not queryable"
      // replaced this.
      expect(await failed).toMatchObject({
        message: expect.stringMatching(
          /^migrate: the slow migrations from 0000_slow \(1 pending\) failed, none of them applied: /,
        ),
      });
      // The pool is usable afterwards: the next migrate of the set applies it.
      await writeFile(join(folder, '0000_slow.sql'), 'SELECT 1;');
      expect(await migrate({ pool, logger: quiet, include: [slow] })).toEqual({
        applied: ['slow/0000_slow'],
      });
    } finally {
      await pool.end();
      await admin.end();
      await rm(folder, { recursive: true, force: true });
      await dropDatabase(adminUrl, name);
    }
  });

  it('applies each migration once when callers upgrade at once under a REPEATABLE READ default', async () => {
    const adminUrl = inject('adminUrl');
    const name = `${inject('runPrefix')}migrate_${randomBytes(4).toString('hex')}`;
    const url = await createDatabase(adminUrl, name);
    const folder = await mkdtemp(join(tmpdir(), 'skiplock-migrations-'));
    const journal = (entries: { tag: string; when: number }[]) =>
      writeFile(
        join(folder, 'meta', '_journal.json'),
        JSON.stringify({
          version: '7',
          dialect: 'postgresql',
          entries: entries.map((e, idx) => ({ idx, version: '7', breakpoints: true, ...e })),
        }),
      );
    try {
      await cp(join(queueMigrations.folder, 'meta'), join(folder, 'meta'), { recursive: true });
      const set = { name: 'rr', folder, table: 'rr_migrations' };
      await writeFile(join(folder, '0000_one.sql'), 'CREATE TABLE rr_one (id int);');
      await journal([{ tag: '0000_one', when: 1 }]);
      await migrate({ connectionString: url, logger: quiet, include: [set] });
      const admin = new pg.Client({ connectionString: url });
      await admin.connect();
      await admin.query(
        `ALTER DATABASE "${name}" SET default_transaction_isolation = 'repeatable read'`,
      );
      await admin.end();
      // The next release: a migration slow enough that the second caller waits for the lock.
      await writeFile(
        join(folder, '0001_two.sql'),
        'SELECT pg_sleep(1);\n--> statement-breakpoint\nCREATE TABLE rr_two (id int);',
      );
      await journal([
        { tag: '0000_one', when: 1 },
        { tag: '0001_two', when: 2 },
      ]);
      // Before: the waiting caller's snapshot was taken before its wait, it read the set as it
      // was, and failed with 'relation "rr_two" already exists' (42P07).
      const results = await Promise.all(
        [0, 1].map(() => migrate({ connectionString: url, logger: quiet, include: [set] })),
      );
      expect(results.flatMap((r) => r.applied).filter((t) => t.startsWith('rr/'))).toEqual([
        'rr/0001_two',
      ]);
    } finally {
      await rm(folder, { recursive: true, force: true });
      await dropDatabase(adminUrl, name);
    }
  });
});
