import { createClient, createWorker, defineJob } from '@skiplock/queue';
import pg from 'pg';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { captureLogs, useTestDatabase } from '../support/db.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { waitFor } from '../support/wait.js';

const db = await useTestDatabase();

describe('a completeWith COMMIT hung in a partition', () => {
  it('still gives the lease up once it went unrenewed for a whole lease, while another worker runs the job', async () => {
    const target = new URL(db.url);
    const proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
    const logs = captureLogs();
    let backend = 0;
    let signal: AbortSignal | null = null;
    const runsB: number[] = [];
    const job = defineJob({
      type: 'commit-hangs',
      payload: z.object({}),
      leaseMs: 1_000,
      handler: async (_p, ctx) => {
        signal = ctx.signal;
        await ctx.completeWith(async (tx) => {
          const { rows } = await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
          backend = rows[0]!.pid;
          // The COMMIT that follows goes into the partition.
          proxy.freeze();
        });
      },
    });
    const poolA = new pg.Pool({ connectionString: proxy.urlThrough(db.url), max: 4 });
    poolA.on('error', () => {});
    const workerA = createWorker({
      pool: poolA,
      workerId: 'commit-hang-a',
      jobs: [job],
      logger: logs.logger,
      listen: false,
      sweeper: false,
      retention: false,
      pollIntervalMs: 20,
      heartbeatIntervalMs: 200,
    });
    const workerB = createWorker({
      pool: db.pool,
      workerId: 'commit-hang-b',
      jobs: [
        defineJob({
          type: 'commit-hangs',
          payload: z.object({}),
          leaseMs: 1_000,
          handler: (_p, ctx) => void runsB.push(ctx.job.attempt),
        }),
      ],
      logger: pino({ level: 'silent' }),
      listen: false,
      pollIntervalMs: 20,
      sweeper: { intervalMs: 100, backoff: { baseMs: 10, maxMs: 20 } },
      retention: false,
    });
    const client = createClient({ pool: db.pool, logger: pino({ level: 'silent' }) });
    const { id } = await client.enqueue(job, {});
    try {
      await workerA.start();
      await waitFor(() => proxy.heldBytes > 0 && backend !== 0, { what: 'the COMMIT held' });
      // The server ends that transaction (a failover, idle_in_transaction_session_timeout, a
      // keepalive): rolled back, the job is processing under a lease nobody renews.
      await db.pool.query('SELECT pg_terminate_backend($1)', [backend]);
      await workerB.start();
      await waitFor(() => runsB.length > 0, { what: 'worker B running the job again' });
      // Before (found in review): A's handler was never aborted while its COMMIT hung, and ran on
      // beside B's attempt until the socket timed out, minutes later.
      await waitFor(() => signal?.aborted === true, {
        what: "worker A giving up the job's lease",
        timeoutMs: 10_000,
      });
      expect(logs.lines.filter((l) => l.reason === 'lock_lost')).toEqual([
        expect.objectContaining({ jobId: id, msg: 'lease lost; aborting handler' }),
      ]);
      expect(runsB).toEqual([2]);
    } finally {
      proxy.sever();
      await workerB.stop({ timeoutMs: 1_000 });
      await workerA.stop({ timeoutMs: 500, graceMs: 500 });
      await proxy.close();
      await poolA.end().catch(() => {});
    }
    const { rows } = await db.pool.query<{ status: string; attempts: number; locked_by: string }>(
      `SELECT status::text, attempts, locked_by FROM skiplock.jobs WHERE id = $1`,
      [id],
    );
    expect(rows[0]).toEqual({ status: 'completed', attempts: 2, locked_by: 'commit-hang-b' });
  });
});
