import { createDatabase, dropDatabase, withDatabaseName } from '@skiplock/devdb';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { migrate } from '../src/index.js';
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
      // Exactly one caller applied the migrations, and says which; the others found none left.
      const appliedLists = results.map((r) => r.applied).filter((list) => list.length > 0);
      expect(appliedLists).toHaveLength(1);
      expect(appliedLists[0]![0]).toBe('queue/0000_init_jobs');
      expect(appliedLists[0]!.every((tag) => tag.startsWith('queue/'))).toBe(true);
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
      expect(rows[0]!.n).toBe(appliedLists[0]!.length);
      expect(tables.rowCount).toBe(1);
      expect(sagaTables.rowCount).toBe(0);
      // The queue table vacuums early (migration 0003): churn leaves dead rows behind fast.
      expect(options.rows[0]!.reloptions).toContain('autovacuum_vacuum_scale_factor=0.02');
    } finally {
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
});
