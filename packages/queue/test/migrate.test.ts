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
    const name = `skiplock_migrate_${randomBytes(4).toString('hex')}`;
    const url = await createDatabase(adminUrl, name);
    try {
      await Promise.all([
        migrate({ connectionString: url, logger: quiet }),
        migrate({ connectionString: url, logger: quiet }),
        migrate({ connectionString: url, logger: quiet }),
      ]);
      // Running again is a no-op.
      await migrate({ connectionString: withDatabaseName(adminUrl, name), logger: quiet });
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
      await client.end();
      expect(rows[0]!.n).toBeGreaterThanOrEqual(4);
      expect(tables.rowCount).toBe(1);
      // The queue table vacuums early (migration 0003): churn leaves dead rows behind fast.
      expect(options.rows[0]!.reloptions).toContain('autovacuum_vacuum_scale_factor=0.02');
    } finally {
      await dropDatabase(adminUrl, name);
    }
  });
});
