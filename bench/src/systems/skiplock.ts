import pg from 'pg';
import { pino } from 'pino';
import { z } from 'zod';
import { createClient, createWorker, defineJob, migrate } from '@skiplock/queue';
import { labelOf } from './labels.js';
import { benchTracerProvider } from './otel.js';
import { chunks, type Payload, type QueueSystem } from './types.js';

const logger = pino({ level: 'warn' });
const payload = z.object({ i: z.number(), t: z.number() });

/** Jobs of the concurrency-key drain spread over this many keys (`i % KEYS`). */
export const KEYS = 1_000;

function noopJob(onJob: (p: Payload) => void = () => {}, keyed = false) {
  return defineJob({
    type: 'bench.noop',
    payload,
    handler: (p) => onJob(p),
    ...(keyed ? { concurrencyKey: (p: Payload) => `k${p.i % KEYS}`, concurrencyLimit: 1 } : {}),
  });
}

/**
 * skiplock with its default settings: nothing here is tuned for the benchmark. `workerOptions`
 * only switches a documented feature off, to measure what it buys (the polling variant).
 */
function skiplockSystem(
  id: string,
  workerOptions: { listen?: boolean; asyncCommit?: boolean; preparedStatements?: boolean } = {},
  keyed = false,
  tracing: 'default' | 'off' | 'sdk' = 'default',
): QueueSystem {
  // `default` is what a user gets: the OpenTelemetry API with no SDK registered (a no-op).
  const traced = (child: boolean) =>
    tracing === 'off'
      ? { tracing: false as const }
      : tracing === 'sdk'
        ? { tracing: { tracerProvider: benchTracerProvider(child) } }
        : {};
  return {
    id,
    label: labelOf(id),
    async install(url) {
      await migrate({ connectionString: url, logger });
    },
    async enqueueBulk(url, payloads, chunk) {
      const client = createClient({ connectionString: url, logger, ...traced(false) });
      const job = noopJob(undefined, keyed);
      try {
        for (const part of chunks(payloads, chunk)) {
          await client.enqueueMany(
            job,
            part.map((p) => ({ payload: p })),
          );
        }
      } finally {
        await client.close();
      }
    },
    async producer(url) {
      const client = createClient({ connectionString: url, logger, ...traced(true) });
      const job = noopJob(undefined, keyed);
      return {
        enqueue: async (p) => {
          await client.enqueue(job, p);
        },
        enqueueMany: async (ps) => {
          await client.enqueueMany(
            job,
            ps.map((p) => ({ payload: p })),
          );
        },
        close: () => client.close(),
      };
    },
    async worker({ url, concurrency, onJob, retention }) {
      const worker = createWorker({
        connectionString: url,
        jobs: [noopJob(onJob, keyed)],
        concurrency,
        logger,
        ...workerOptions,
        ...traced(true),
        // Churn: finished jobs leave after a second instead of a week, so the run shows pruning.
        ...(retention ? { retention: { completedAgeMs: 1_000, intervalMs: 1_000 } } : {}),
      });
      // Open the pool's first connection now, as the peers do at start, so `go` measures work.
      const probe = new pg.Client({ connectionString: url });
      await probe.connect();
      await probe.end();
      return { go: () => worker.start(), stop: () => worker.stop({ timeoutMs: 2_000 }) };
    },
    remainingSql: `SELECT count(*)::int AS n FROM skiplock.jobs WHERE status NOT IN ('completed', 'dead', 'cancelled')`,
    schema: 'skiplock',
    isClaim: (text) => text.includes("SET status = 'processing'"),
    async claimProbe(url, batch, rounds) {
      // `concurrency: batch` with no prefetch: each runOnce() claims `batch` jobs in one
      // statement, runs them and commits their completion before the next round.
      const worker = createWorker({
        connectionString: url,
        jobs: [noopJob(undefined, keyed)],
        concurrency: batch,
        maxPrefetch: 0,
        logger,
        ...workerOptions,
      });
      const latenciesMs: number[] = [];
      let claimed = 0;
      let first: number | null = null;
      worker.on('job:claimed', () => {
        first ??= performance.now();
        claimed += 1;
      });
      try {
        for (let round = 0; round < rounds; round++) {
          first = null;
          const sent = performance.now();
          await worker.runOnce();
          if (first !== null) latenciesMs.push(first - sent);
        }
      } finally {
        await worker.stop();
      }
      return { latenciesMs, claimed };
    },
    mostActivePerKeySql: `SELECT coalesce(max(n), 0)::int AS n FROM (
      SELECT count(*) AS n FROM skiplock.jobs
      WHERE status = 'processing' AND concurrency_key IS NOT NULL GROUP BY concurrency_key) k`,
  };
}

export const skiplock = skiplockSystem('skiplock');
/** LISTEN off, as behind PgBouncer in transaction mode: workers find work by jittered polling. */
export const skiplockPolling = skiplockSystem('skiplock-poll', { listen: false });
/** Claims, completions and renewals wait for their WAL flush, as bare SQL and graphile-worker do. */
export const skiplockSyncCommit = skiplockSystem('skiplock-sync', { asyncCommit: false });
/** Claims and completions sent unnamed, parsed and planned on every call (as behind old PgBouncers). */
export const skiplockUnprepared = skiplockSystem('skiplock-unprepared', {
  preparedStatements: false,
});
/** OpenTelemetry off (`tracing: false`): no span object at all, the baseline of the default. */
export const skiplockUntraced = skiplockSystem('skiplock-untraced', {}, false, 'off');
/** An OpenTelemetry SDK registered, recording every enqueue and run (see otel.ts). */
export const skiplockOtel = skiplockSystem('skiplock-otel', {}, false, 'sdk');
/** Every job names a concurrency key (`k<i % 1000>`) with limit 1. */
export const skiplockKeyed = skiplockSystem('skiplock-keyed', {}, true);
