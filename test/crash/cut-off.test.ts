import { createClient, createWorker, defineJob, type JobContext } from '@skiplock/queue';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { captureLogs, useTestDatabase } from '../support/db.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { waitFor } from '../support/wait.js';
import { metricValue } from '../support/metrics.js';

const TYPE = 'cutoff.work';
const LEASE_MS = 1_000;
const payload = z.object({ n: z.number().int(), finish: z.enum(['when_told', 'never']) });

function cutoffJob(handler: (p: z.output<typeof payload>, ctx: JobContext) => Promise<void>) {
  return defineJob({ type: TYPE, payload, leaseMs: LEASE_MS, maxAttempts: 5, handler });
}

/** Resolves when the handler's signal fires (the worker gave its lease up). */
function untilAborted(signal: AbortSignal): Promise<void> {
  return new Promise((_, reject) => {
    if (signal.aborted) return reject(signal.reason);
    signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  });
}

// `hang`: the network holds every byte (queries neither fail nor return). `die`: every connection
// is reset and new ones refused (queries fail at once, and the settle retries with backoff).
describe.each(['hang', 'die'] as const)('a worker cut off from the database (%s)', (cut) => {
  it('loses its leases; another worker completes the jobs; its late completions touch 0 rows', async () => {
    const db = await useTestDatabase();
    const target = new URL(db.url);
    const proxy = await startTcpProxy({
      host: target.hostname,
      port: Number(target.port || 5432),
    });
    const logsA = captureLogs();
    let tell!: () => void;
    const told = new Promise<void>((resolve) => (tell = resolve));
    const runsA: string[] = [];
    const runsB: string[] = [];

    // Worker A reaches the database only through the proxy. Half its jobs finish when told (after
    // the cut, so their completions are sent into the partition); the other half run until A
    // itself gives their leases up.
    const workerA = createWorker({
      connectionString: proxy.urlThrough(db.url),
      workerId: 'cutoff-a',
      jobs: [
        cutoffJob(async (p, ctx) => {
          runsA.push(ctx.job.id);
          if (p.finish === 'when_told') await told;
          else await untilAborted(ctx.signal);
        }),
      ],
      concurrency: 10,
      // Its late completions must outlast the partition, which lasts until worker B has taken
      // every lease back: 8 tries (about 8 s of backoff at least) can run out on a loaded machine.
      settleAttempts: 20,
      heartbeatIntervalMs: 200,
      pollIntervalMs: 50,
      listen: false,
      sweeper: false,
      retention: false,
      logger: logsA.logger,
    });

    const client = createClient({ pool: db.pool, logger: pino({ level: 'silent' }) });
    const def = cutoffJob(async () => {});
    const jobs = await client.enqueueMany(
      def,
      Array.from({ length: 6 }, (_, n) => ({
        payload: { n, finish: n % 2 === 0 ? ('when_told' as const) : ('never' as const) },
      })),
    );
    const ids = jobs.map((j) => j.id).sort();
    const toldIds = jobs.filter((_, n) => n % 2 === 0).map((j) => j.id);
    const neverIds = jobs.filter((_, n) => n % 2 === 1).map((j) => j.id);

    await workerA.start();
    await waitFor(() => runsA.length === ids.length, { what: 'worker A running all jobs' });

    if (cut === 'hang') {
      proxy.freeze();
      tell();
      // A finishes three handlers while cut off; their completions wait in the partition.
      await waitFor(() => proxy.heldBytes > 0, { what: 'worker A writing into the partition' });
    } else {
      proxy.sever();
      tell();
      // A finishes three handlers while cut off; their completions fail and are retried.
      await waitFor(
        () => logsA.lines.some((l) => l.reason === 'db_error' && l.attempt !== undefined),
        { what: 'worker A retrying its completions' },
      );
    }

    // A cannot renew for a whole lease, so it aborts the handlers still running, by itself.
    await waitFor(
      () =>
        neverIds.every((id) => logsA.lines.some((l) => l.reason === 'lock_lost' && l.jobId === id)),
      { timeoutMs: 10_000, what: 'worker A giving up the leases of its running jobs' },
    );

    const workerB = createWorker({
      pool: db.pool,
      workerId: 'cutoff-b',
      jobs: [
        cutoffJob(async (_p, ctx) => {
          runsB.push(ctx.job.id);
        }),
      ],
      concurrency: 10,
      pollIntervalMs: 50,
      listen: false,
      sweeper: { intervalMs: 100, backoff: { baseMs: 10, maxMs: 20 } },
      retention: false,
      logger: pino({ level: 'silent' }),
    });
    await workerB.start();
    try {
      const completed = async () =>
        (
          await db.pool.query<{ id: string; updated_at: Date }>(
            `SELECT id::text, updated_at FROM skiplock.jobs
             WHERE status = 'completed' AND locked_by = 'cutoff-b' ORDER BY id`,
          )
        ).rows;
      const byB = await waitFor(
        async () => {
          const rows = await completed();
          return rows.length === ids.length ? rows : null;
        },
        { what: 'worker B completing every job' },
      );
      expect(proxy.frozen).toBe(cut === 'hang');
      // Until the partition heals, A has not heard back about the handlers that finished.
      expect(logsA.lines.filter((l) => toldIds.includes(String(l.jobId)))).toEqual([]);

      // The partition heals: A's late completions reach the database and find nothing of theirs.
      proxy.resume();
      await waitFor(
        () =>
          toldIds.every((id) =>
            logsA.lines.some((l) => l.reason === 'lock_lost' && l.jobId === id),
          ),
        { what: "worker A's late completions reporting lock_lost" },
      );
      await workerA.stop({ timeoutMs: 1_000 });

      // Exactly B's completion stands: A's late writes changed nothing.
      expect(await completed()).toEqual(byB);
      const { rows } = await db.pool.query<{
        id: string;
        attempts: number;
        errors: { attempt: number; reason: string; message: string }[];
      }>(`SELECT id::text, attempts, errors FROM skiplock.jobs ORDER BY id`);
      for (const row of rows) {
        expect(row.attempts).toBe(2);
        expect(row.errors).toEqual([
          expect.objectContaining({
            attempt: 1,
            reason: 'lease_expired',
            message: expect.stringContaining('cutoff-a'),
          }),
        ]);
      }
      expect([...runsA].sort()).toEqual(ids);
      expect([...runsB].sort()).toEqual(ids);
      // Every one of A's results was refused as a lost lock; none counted as completed.
      const outcomes = (outcome: string) =>
        metricValue(workerA.metrics, 'skiplock_job_outcomes_total', { outcome });
      expect(await outcomes('completed')).toBe(0);
      expect(await outcomes('lock_lost')).toBe(ids.length);
    } finally {
      proxy.resume();
      await workerB.stop({ timeoutMs: 1_000 });
      await workerA.stop({ timeoutMs: 1_000 });
      await proxy.close();
    }
  }, 60_000);
});
