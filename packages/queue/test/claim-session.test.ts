import net from 'node:net';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob } from '../src/index.js';
import { Listener } from '../src/listener.js';
import { preparedRunner } from '../src/prepared.js';
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
      // generic_plans and custom_plans are PostgreSQL 14+ (the servers tests run on are newer).
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

  it('with preparedStatements: false a worker claims on its pool and runOnce() opens no LISTEN connection', async () => {
    const job = defineJob({
      type: 'session-unnamed',
      queue: 'session-unnamed',
      payload: z.object({}),
      handler: () => {},
    });
    const worker = testWorker(db.newPool(2), [job], { listen: true, preparedStatements: false });
    try {
      await client.enqueue(job, {});
      expect(await worker.runOnce()).toBe(1);
      // Unnamed, the generic plan saves nothing: that connection is left to its notifications.
      expect(await listenerBackends()).toEqual([]);
    } finally {
      await worker.stop();
    }
  });

  it('runOnce() on a worker never started leaves waiting jobs to a started admitter', async () => {
    const keyed = defineJob({
      type: 'session-keyed',
      queue: 'session-keyed',
      payload: z.object({}),
      concurrencyKey: () => 'session-key',
      handler: () => {},
    });
    const { id } = await client.enqueue(keyed, {});
    const worker = testWorker(db.newPool(2), [keyed], { listen: true });
    try {
      // The LISTEN connection runOnce() opens says "admit everything" when it comes up; only a
      // started worker's admitter may act on that (stop() stops it only then).
      expect(await worker.runOnce()).toBe(0);
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect((await client.getJob(id))?.status).toBe('waiting');
    } finally {
      await worker.stop();
    }
  });
});

describe('waiting for the LISTEN connection', () => {
  /** A port that refuses connections, and one that accepts them and never answers. */
  async function deadPorts(): Promise<{ refused: number; silent: number; close: () => void }> {
    const listen = (server: net.Server) =>
      new Promise<number>((resolve) =>
        server.listen(0, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port)),
      );
    const gone = net.createServer();
    const refused = await listen(gone);
    await new Promise((resolve) => gone.close(resolve));
    const sockets: net.Socket[] = [];
    // Reads what it is sent (so the client's close goes through) and never answers.
    const silentServer = net.createServer((socket) => {
      sockets.push(socket);
      socket.resume();
    });
    const silent = await listen(silentServer);
    return {
      refused,
      silent,
      close: () => {
        for (const socket of sockets) socket.destroy();
        silentServer.close();
      },
    };
  }

  it('ready() ends at a failed attempt, once the listener gave up, and on stop()', async () => {
    const ports = await deadPorts();
    const refusing = new Listener({
      connection: { host: '127.0.0.1', port: ports.refused, user: 'nobody' },
      onNotify: () => {},
      logger: quiet,
      maxReconnectAttempts: 0,
    });
    const silent = new Listener({
      connection: { host: '127.0.0.1', port: ports.silent, user: 'nobody' },
      onNotify: () => {},
      logger: quiet,
    });
    try {
      // Each wait is far longer than the test's timeout: only an early end lets it pass.
      expect(await refusing.ready(600_000)).toBe(false);
      // One failure with no retries allowed: it gave up, and says so without waiting.
      expect(await refusing.ready(600_000)).toBe(false);
      const waiting = silent.ready(600_000);
      await new Promise((resolve) => setTimeout(resolve, 100));
      await silent.stop();
      expect(await waiting).toBe(false);
      expect(await silent.ready(600_000)).toBe(false);
    } finally {
      await refusing.stop();
      await silent.stop();
      ports.close();
    }
  });
});

describe('a lost prepared statement on a connection of its own', () => {
  it('is sent again unnamed when the statement ran alone, and fails when it was in a transaction', async () => {
    const session = new pg.Client({ connectionString: db.url });
    await session.connect();
    try {
      const run = preparedRunner({ enabled: true, pool: db.pool, logger: quiet, who: 'test' });
      const statement = { name: 'session_lost', text: 'SELECT $1::int AS n', values: [7] };
      expect((await run<{ n: number }>(session, statement, undefined, true)).rows).toEqual([
        { n: 7 },
      ]);
      // As PgBouncer or a DISCARD ALL would: node-postgres still thinks it is prepared here.
      await session.query('DEALLOCATE ALL');
      expect((await run<{ n: number }>(session, statement, undefined, true)).rows).toEqual([
        { n: 7 },
      ]);

      const other = preparedRunner({ enabled: true, pool: db.pool, logger: quiet, who: 'test' });
      const named = { name: 'session_lost_tx', text: 'SELECT $1::int AS n', values: [8] };
      await other(session, named);
      await session.query('DEALLOCATE ALL');
      await expect(other(session, named)).rejects.toMatchObject({ code: '26000' });
    } finally {
      await session.end();
    }
  });
});
