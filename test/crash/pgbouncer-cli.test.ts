import { createDatabase, dropDatabase } from '@skiplock/devdb';
import { createClient, defineJob, migrate } from '@skiplock/queue';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { pino } from 'pino';
import { describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import { runInProcess } from '../../packages/cli/test/run-cli.js';
import { findPgbouncer, startPgbouncer } from '../support/pgbouncer.js';

const pgbouncer = findPgbouncer();
if (!pgbouncer) {
  console.warn(
    '[pgbouncer] SKIPPED the PgBouncer CLI test: no `pgbouncer` binary on PATH or in ' +
      '/usr/sbin. Install it (Debian: apt-get install pgbouncer); .ci/run tries to.',
  );
}

const quiet = pino({ level: 'silent' });

describe('the CLI through PgBouncer in transaction pooling mode', () => {
  it.skipIf(!pgbouncer)(
    'connects and acts: PgBouncer refuses startup parameters it does not know, so the CLI sends none',
    async () => {
      const adminUrl = inject('adminUrl');
      const name = `${inject('runPrefix')}bouncer_cli_${randomBytes(4).toString('hex')}`;
      const url = await createDatabase(adminUrl, name);
      await migrate({ connectionString: url, logger: quiet });
      const bouncer = await startPgbouncer(pgbouncer!, url, {
        poolMode: 'transaction',
        poolSize: 2,
      });
      const pool = new pg.Pool({ connectionString: url, max: 2 });
      pool.on('error', () => {});
      try {
        const client = createClient({ pool, logger: quiet });
        const def = defineJob({ type: 'bounced', payload: z.object({}), handler: () => {} });
        const { id } = await client.enqueue(def, {});
        const env = { DATABASE_URL: bouncer.url };
        // Before (a lock_timeout startup parameter): "unsupported startup parameter", exit 1.
        const stats = await runInProcess(['stats', '--json'], env);
        expect(stats.code, stats.stderr).toBe(0);
        expect(JSON.parse(stats.stdout).stats).toContainEqual(
          expect.objectContaining({ status: 'pending', count: 1 }),
        );
        // Its bounded wait for the job's row is per statement, and works through the pooler.
        const cancelled = await runInProcess(['jobs', 'cancel', id], env);
        expect(cancelled.code, cancelled.stderr).toBe(0);
        expect((await client.getJob(id))?.status).toBe('cancelled');
      } finally {
        await pool.end().catch(() => {});
        await bouncer.stop();
        await dropDatabase(adminUrl, name);
      }
    },
    120_000,
  );
});
