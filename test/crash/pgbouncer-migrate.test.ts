import { createDatabase, dropDatabase } from '@skiplock/devdb';
import { migrate } from '@skiplock/queue';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { pino } from 'pino';
import { describe, expect, inject, it } from 'vitest';
import { findPgbouncer, startPgbouncer } from '../support/pgbouncer.js';

const pgbouncer = findPgbouncer();
if (!pgbouncer) {
  console.warn(
    '[pgbouncer] SKIPPED the PgBouncer migrate test: no `pgbouncer` binary on PATH or in ' +
      '/usr/sbin. Install it (Debian: apt-get install pgbouncer); .ci/run tries to.',
  );
}

const quiet = pino({ level: 'silent' });

describe('migrate through PgBouncer in transaction pooling mode', () => {
  it.skipIf(!pgbouncer)(
    'concurrent migrates of a fresh database all succeed, each migration applied once, and no lock is left held',
    async () => {
      const adminUrl = inject('adminUrl');
      const name = `${inject('runPrefix')}bouncer_migrate_${randomBytes(4).toString('hex')}`;
      const url = await createDatabase(adminUrl, name);
      const bouncer = await startPgbouncer(pgbouncer!, url, {
        poolMode: 'transaction',
        poolSize: 4,
      });
      const direct = new pg.Client({ connectionString: url });
      direct.on('error', () => {});
      await direct.connect();
      try {
        // Before: a session lock and its unlock went to whichever server connection was free, so
        // 3 of 4 failed on duplicate types, and the lock stayed held on a pooled connection.
        const results = await Promise.all(
          Array.from({ length: 4 }, () =>
            migrate({ connectionString: bouncer.url, logger: quiet }),
          ),
        );
        const applied = results.flatMap((r) => r.applied);
        expect(new Set(applied).size).toBe(applied.length);
        const { rows } = await direct.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM skiplock.migrations',
        );
        expect(applied.filter((t) => t.startsWith('queue/'))).toHaveLength(rows[0]!.n);
        const held = await direct.query(
          `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = $1`,
          [0x5c10c],
        );
        expect(held.rows).toEqual([]);
        // So a later migrate on a direct connection (the next deploy) does not wait behind it.
        await direct.query('SET statement_timeout = 5000');
        await direct.query('BEGIN');
        await direct.query('SELECT pg_advisory_xact_lock($1, 1)', [0x5c10c]);
        await direct.query('ROLLBACK');
        expect(await migrate({ connectionString: url, logger: quiet })).toEqual({ applied: [] });
      } finally {
        await direct.end().catch(() => {});
        await bouncer.stop();
        await dropDatabase(adminUrl, name);
      }
    },
    120_000,
  );
});
