import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob } from '../src/index.js';
import { Listener } from '../src/listener.js';
import { CLAIM_SESSION_SQL } from '../src/sql/claim.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { quiet, testWorker } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

/** This database's worker LISTEN connections, with the last statement each ran. */
async function listenerBackends(): Promise<{ pid: number; query: string }[]> {
  const { rows } = await db.pool.query<{ pid: number; query: string }>(
    `SELECT pid, query FROM pg_stat_activity
     WHERE application_name = 'skiplock-listener' AND datname = current_database()`,
  );
  return rows;
}

describe('claims on the LISTEN connection', () => {
  it('sets the connection up for claims: prepared statements get a generic plan from the first run', async () => {
    const listener = new Listener({
      connection: { connectionString: db.url },
      onNotify: () => {},
      logger: quiet,
      sessionSql: CLAIM_SESSION_SQL,
    });
    expect(listener.claimClient).toBeNull();
    try {
      expect(await listener.ready(10_000)).toBe(true);
      const session = listener.claimClient!;
      const mode = await session.query<{ plan_cache_mode: string }>('SHOW plan_cache_mode');
      expect(mode.rows[0]!.plan_cache_mode).toBe('force_generic_plan');
      const statement = {
        name: 'session_probe',
        text: 'SELECT count(*) FROM skiplock.jobs WHERE queue = $1',
        values: ['none'],
      };
      for (let i = 0; i < 3; i++) await session.query(statement);
      const plans = await session.query<{ generic_plans: string; custom_plans: string }>(
        `SELECT generic_plans::text, custom_plans::text FROM pg_prepared_statements
         WHERE name = 'session_probe'`,
      );
      expect(plans.rows).toEqual([{ generic_plans: '3', custom_plans: '0' }]);
    } finally {
      await listener.stop();
    }
    expect(listener.claimClient).toBeNull();
  });

  it('a worker claims there, again after the connection is terminated, and stop() closes it', async () => {
    let runs = 0;
    const job = defineJob({
      type: 'session-claim',
      queue: 'session-claim',
      payload: z.object({ n: z.number() }),
      handler: () => void (runs += 1),
    });
    // runOnce() claims on the LISTEN connection as the loop does: it opens it on first use.
    const worker = testWorker(db.newPool(2), [job], { listen: true, pollIntervalMs: 600_000 });
    try {
      expect(await listenerBackends()).toEqual([]);
      await client.enqueue(job, { n: 1 });
      expect(await worker.runOnce()).toBe(1);
      const [first, ...others] = await listenerBackends();
      expect(others).toEqual([]);
      expect(first!.query).toContain('FOR UPDATE SKIP LOCKED');

      // Terminated: the listener reconnects (with backoff) and the claims follow it there.
      await db.pool.query('SELECT pg_terminate_backend($1)', [first!.pid]);
      await waitFor(
        async () => {
          const now = await listenerBackends();
          return now.length === 1 && now[0]!.pid !== first!.pid;
        },
        { timeoutMs: 30_000, what: 'the LISTEN connection to come back' },
      );
      await client.enqueue(job, { n: 2 });
      expect(await worker.runOnce()).toBe(1);
      const [second] = await listenerBackends();
      expect(second!.pid).not.toBe(first!.pid);
      expect(second!.query).toContain('FOR UPDATE SKIP LOCKED');
      expect(runs).toBe(2);
    } finally {
      await worker.stop();
    }
    await waitFor(async () => (await listenerBackends()).length === 0, {
      what: 'stop() to close the LISTEN connection runOnce() opened',
    });
  });
});
