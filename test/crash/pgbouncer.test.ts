import { createClient, createWorker, defineJob, type Worker } from '@skiplock/queue';
import pg from 'pg';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { useTestDatabase } from '../support/db.js';
import { findPgbouncer, startPgbouncer } from '../support/pgbouncer.js';
import { waitFor } from '../support/wait.js';
import { metricValue } from '../support/metrics.js';

const pgbouncer = findPgbouncer();
if (!pgbouncer) {
  console.warn(
    '[pgbouncer] SKIPPED the PgBouncer transaction-pooling test: no `pgbouncer` binary on PATH ' +
      'or in /usr/sbin. Install it (Debian: apt-get install pgbouncer); .ci/run tries to.',
  );
}

const SHORT_JOBS = 200;
const LONG_JOBS = 2;
const LEASE_MS = 1_000;
const POOL_SIZE = 2;
const WORKER_IDS = ['bouncer-a', 'bouncer-b', 'bouncer-c'];

describe('workers through PgBouncer in transaction pooling mode', () => {
  it.skipIf(!pgbouncer)(
    'claim, complete and renew leases with listening off',
    async () => {
      const db = await useTestDatabase();
      const bouncer = await startPgbouncer(pgbouncer!, db.url, {
        poolMode: 'transaction',
        poolSize: POOL_SIZE,
      });
      const workers: Worker[] = [];
      const admin = new pg.Client({ connectionString: bouncer.adminUrl });
      try {
        const short = defineJob({
          type: 'bouncer.short',
          payload: z.object({ n: z.number().int() }),
          handler: async () => {},
        });
        // A long job finishes only once the database shows its lease renewed twice by heartbeats
        // and the database clock has passed the lease it was claimed with: without heartbeats
        // through PgBouncer, the sweeper (also through PgBouncer) would have taken it back.
        const long = defineJob({
          type: 'bouncer.long',
          payload: z.object({ n: z.number().int() }),
          leaseMs: LEASE_MS,
          handler: async (_p, ctx) => {
            const leases = new Set<string>();
            let claimedLease: Date | null = null;
            await waitFor(
              async () => {
                const { rows } = await db.pool.query<{ lease: Date; now: Date }>(
                  'SELECT lease_expires_at AS lease, now() AS now FROM skiplock.jobs WHERE id = $1',
                  [ctx.job.id],
                );
                const { lease, now } = rows[0]!;
                claimedLease ??= lease;
                leases.add(lease.toISOString());
                return leases.size >= 3 && now > claimedLease;
              },
              { timeoutMs: 15_000, intervalMs: 50, what: `job ${ctx.job.id} renewed twice` },
            );
          },
        });
        const client = createClient({
          connectionString: bouncer.url,
          logger: pino({ level: 'silent' }),
        });
        try {
          await client.enqueueMany(
            short,
            Array.from({ length: SHORT_JOBS }, (_, n) => ({ payload: { n } })),
          );
          await client.enqueueMany(
            long,
            Array.from({ length: LONG_JOBS }, (_, n) => ({ payload: { n } })),
          );
        } finally {
          await client.pool.end();
        }

        // Three workers, each pool holding its connection until 10 s idle, on POOL_SIZE = 2 server
        // connections: at least three clients are connected while the jobs run (with two workers,
        // a CI run saw only two, each worker's pool having needed one connection).
        for (const name of WORKER_IDS) {
          const worker = createWorker({
            connectionString: bouncer.url,
            workerId: name,
            jobs: [short, long],
            listen: false,
            pollIntervalMs: 50,
            concurrency: 5,
            heartbeatIntervalMs: 200,
            sweeper: { intervalMs: 200 },
            retention: false,
            logger: pino({ level: 'silent' }),
          });
          workers.push(worker);
          await worker.start();
        }

        // Sampled while the jobs run: once they are done, the workers' pools close idle
        // connections (after 10 s) and the count of clients says nothing (a CI run saw 2 and 2).
        await admin.connect();
        let mostClients = 0;
        let mostServers = 0;
        await waitFor(
          async () => {
            const clients = (await admin.query<{ database: string }>('SHOW CLIENTS')).rows.filter(
              (r) => r.database !== 'pgbouncer',
            );
            const servers = (await admin.query('SHOW SERVERS')).rows;
            mostClients = Math.max(mostClients, clients.length);
            mostServers = Math.max(mostServers, servers.length);
            const { rows } = await db.pool.query<{ n: number }>(
              "SELECT count(*)::int AS n FROM skiplock.jobs WHERE status = 'completed'",
            );
            return rows[0]!.n === SHORT_JOBS + LONG_JOBS;
          },
          { timeoutMs: 45_000, what: 'every job completed through PgBouncer' },
        );

        // More clients than server connections: PgBouncer multiplexed them per transaction.
        expect(mostServers).toBeLessThanOrEqual(POOL_SIZE);
        expect(mostClients).toBeGreaterThan(POOL_SIZE);

        const { rows } = await db.pool.query<{
          job_type: string;
          attempts: number;
          errors: unknown[];
          locked_by: string;
        }>('SELECT job_type, attempts, errors, locked_by FROM skiplock.jobs');
        // Claimed once, completed once, never swept: every lease held.
        expect(rows.every((r) => r.attempts === 1 && r.errors.length === 0)).toBe(true);
        expect(rows.every((r) => WORKER_IDS.includes(r.locked_by))).toBe(true);
        for (const worker of workers) {
          expect(await metricValue(worker.metrics, 'skiplock_claim_errors_total')).toBe(0);
          expect(await metricValue(worker.metrics, 'skiplock_lease_expiries_recovered_total')).toBe(
            0,
          );
        }
        // The sweeper's advisory-locked passes ran through PgBouncer too.
        expect(workers.some((w) => w.sweeper !== null)).toBe(true);
      } finally {
        await Promise.all(workers.map((w) => w.stop({ timeoutMs: 1_000 })));
        await admin.end().catch(() => {});
        await bouncer.stop();
      }
    },
    60_000,
  );
});
