import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { createDatabase, dropDatabase } from '@skiplock/devdb';
import { migrate as migrateQueue } from '@skiplock/queue';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { migrate, sagaMigrations } from '../src/index.js';
import { silent } from './fixtures.js';

async function withFreshDatabase(test: (url: string) => Promise<void>) {
  const adminUrl = inject('adminUrl');
  const name = `${inject('runPrefix')}saga_migrate_${randomBytes(4).toString('hex')}`;
  const url = await createDatabase(adminUrl, name);
  try {
    await test(url);
  } finally {
    await dropDatabase(adminUrl, name);
  }
}

async function sagaTables(url: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ table_name: string }>(
      `SELECT table_name FROM information_schema.tables
       WHERE table_schema = 'skiplock' AND table_name LIKE 'saga%' ORDER BY table_name`,
    );
    return rows.map((r) => r.table_name);
  } finally {
    await client.end();
  }
}

describe('saga migrations', () => {
  it('one call migrates the queue tables and then the saga tables, from the package folder', async () => {
    await withFreshDatabase(async (url) => {
      const { applied } = await migrate({ connectionString: url, logger: silent });
      expect(applied[0]).toBe('queue/0000_init_jobs');
      expect(applied.filter((m) => m.startsWith('saga/'))).toEqual([
        'saga/0000_saga_tables',
        'saga/0001_sagas_hot_pointer',
        'saga/0002_sagas_trace_context',
        'saga/0003_saga_lock_key',
        'saga/0004_saga_children',
        'saga/0005_sagas_current_since',
      ]);
      expect(await sagaTables(url)).toEqual([
        'saga_migrations',
        'saga_signals',
        'saga_steps',
        'sagas',
      ]);
      expect((await migrate({ connectionString: url, logger: silent })).applied).toEqual([]);
    });
  });

  it('adopts saga tables created by the older layout, where the queue migrated them', async () => {
    await withFreshDatabase(async (url) => {
      await migrateQueue({ connectionString: url, logger: silent });
      // The older layout ran the same statements as the queue's migration 0002, unrecorded here.
      const sql = await readFile(join(sagaMigrations.folder, '0000_saga_tables.sql'), 'utf8');
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        for (const statement of sql.split('--> statement-breakpoint')) {
          await client.query(statement);
        }
        await client.query(`INSERT INTO skiplock.sagas (id, name, version, input)
                            VALUES ('kept', 'bill', 1, '{}')`);
      } finally {
        await client.end();
      }
      const { applied } = await migrate({ connectionString: url, logger: silent });
      expect(applied).toEqual([
        'saga/0000_saga_tables',
        'saga/0001_sagas_hot_pointer',
        'saga/0002_sagas_trace_context',
        'saga/0003_saga_lock_key',
        'saga/0004_saga_children',
        'saga/0005_sagas_current_since',
      ]);
      const check = new pg.Client({ connectionString: url });
      await check.connect();
      try {
        const { rows } = await check.query<{ id: string }>('SELECT id FROM skiplock.sagas');
        expect(rows).toEqual([{ id: 'kept' }]);
        // 0001: no index on the pointer that every step updates, and room on pages for HOT.
        const { rows: idx } = await check.query(
          `SELECT indexname FROM pg_indexes WHERE schemaname = 'skiplock' AND indexname = 'sagas_live_job_idx'`,
        );
        expect(idx).toEqual([]);
        const { rows: opts } = await check.query<{ reloptions: string[] }>(
          `SELECT reloptions FROM pg_class WHERE oid = 'skiplock.sagas'::regclass`,
        );
        expect(opts[0]!.reloptions).toEqual(['fillfactor=85']);
      } finally {
        await check.end();
      }
    });
  });
});
