import { createClient, defineJob } from '@skiplock/queue';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { captureLogs, useTestDatabase } from '../support/db.js';
import { findPgbouncer, startPgbouncer } from '../support/pgbouncer.js';

const pgbouncer = findPgbouncer();
if (!pgbouncer) {
  console.warn(
    '[pgbouncer] SKIPPED the PgBouncer enqueue test: no `pgbouncer` binary on PATH or in ' +
      '/usr/sbin. Install it (Debian: apt-get install pgbouncer); .ci/run tries to.',
  );
}

const job = defineJob({
  type: 'bouncer.enqueue',
  payload: z.object({ n: z.number().int() }),
  handler: async () => {},
});

describe('enqueue through PgBouncer in transaction pooling mode', () => {
  it.skipIf(!pgbouncer)(
    'concurrent single and bulk enqueues all land, with prepared statements on or off',
    async () => {
      const db = await useTestDatabase();
      const bouncer = await startPgbouncer(pgbouncer!, db.url, {
        poolMode: 'transaction',
        poolSize: 2,
      });
      try {
        for (const preparedStatements of [undefined, false]) {
          const logs = captureLogs();
          const client = createClient({
            connectionString: bouncer.url,
            logger: logs.logger,
            maxConnections: 6,
            ...(preparedStatements === undefined ? {} : { preparedStatements }),
          });
          try {
            const results = await Promise.all(
              Array.from({ length: 6 }, async (_, lane) => {
                const ids: string[] = [];
                for (let i = 0; i < 30; i++) {
                  const n = lane * 1_000 + i;
                  const key = i % 2 ? { idempotencyKey: `k-${preparedStatements}-${n}` } : {};
                  ids.push((await client.enqueue(job, { n }, key)).id);
                  if (i % 10 === 0) {
                    const bulk = await client.enqueueMany(job, [{ payload: { n } }]);
                    ids.push(bulk[0]!.id);
                  }
                }
                return ids;
              }),
            );
            expect(new Set(results.flat()).size).toBe(6 * 33);
            // Before PgBouncer 1.21 a named statement does not follow the client: the client
            // notices once and goes on unnamed.
            expect(logs.reasons().filter((r) => r !== 'prepared_statements_off')).toEqual([]);
          } finally {
            await client.close();
          }
        }
      } finally {
        await bouncer.stop();
      }
    },
    60_000,
  );
});
