import { PgBoss } from 'pg-boss-12';
import { KEYS } from './skiplock.js';
import { labelOf } from './labels.js';
import { chunks, type Payload, type QueueSystem } from './types.js';

// pg-boss 12 beside the pg-boss 10 of the other scenarios: group concurrency is new in 12. Its
// own schema, so both can be installed in one template without meeting.
const SCHEMA = 'pgboss12';
const QUEUE = 'noop';
const BATCH = 100;

const quiet = { supervise: false, schedule: false, migrate: false } as const;

/**
 * pg-boss 12 at the batch settings of the pg-boss 10 system: each of `concurrency` workers fetches
 * 100 jobs at a time and polls at 0.5 s. With `grouped`, every job is in group `k<i % 1000>` and
 * workers fetch with `groupConcurrency: 1`, pg-boss's limit across all nodes.
 */
function pgboss12System(id: string, grouped: boolean): QueueSystem {
  const job = (p: Payload) => ({
    data: p,
    ...(grouped ? { group: { id: `k${p.i % KEYS}` } } : {}),
  });
  const boss = (url: string, max: number, extra: object = quiet) => {
    const b = new PgBoss({ connectionString: url, schema: SCHEMA, max, ...extra });
    b.on('error', (error) => process.stderr.write(`pg-boss 12: ${String(error)}\n`));
    return b;
  };
  const stop = (b: PgBoss) => b.stop({ graceful: false, timeout: 2_000 });
  return {
    id,
    label: labelOf(id),
    async install(url) {
      const b = boss(url, 2, { supervise: false, schedule: false });
      await b.start();
      await b.createQueue(QUEUE);
      await stop(b);
    },
    async enqueueBulk(url, payloads, chunk) {
      const b = boss(url, 2);
      await b.start();
      try {
        for (const part of chunks(payloads, chunk)) await b.insert(QUEUE, part.map(job));
      } finally {
        await stop(b);
      }
    },
    async producer(url) {
      const b = boss(url, 2);
      await b.start();
      return {
        enqueue: async (p) => {
          await b.send(QUEUE, p, grouped ? { group: { id: `k${p.i % KEYS}` } } : {});
        },
        enqueueMany: async (ps) => {
          await b.insert(QUEUE, ps.map(job));
        },
        close: () => stop(b),
      };
    },
    async worker({ url, concurrency, onJob }) {
      const b = boss(url, Math.min(concurrency + 2, 20), { migrate: false, schedule: false });
      await b.start();
      return {
        go: async () => {
          for (let i = 0; i < concurrency; i++) {
            await b.work<Payload>(
              QUEUE,
              {
                batchSize: BATCH,
                pollingIntervalSeconds: 0.5,
                ...(grouped ? { groupConcurrency: 1 } : {}),
              },
              async (jobs) => {
                for (const j of jobs) onJob(j.data);
              },
            );
          }
        },
        stop: () => stop(b),
      };
    },
    remainingSql: `SELECT count(*)::int AS n FROM ${SCHEMA}.job WHERE name = '${QUEUE}' AND state < 'completed'`,
    schema: SCHEMA,
    isClaim: (text) => text.includes('SKIP LOCKED'),
    mostActivePerKeySql: `SELECT coalesce(max(n), 0)::int AS n FROM (
      SELECT count(*) AS n FROM ${SCHEMA}.job
      WHERE name = '${QUEUE}' AND state = 'active' AND group_id IS NOT NULL GROUP BY group_id) g`,
  };
}

export const pgboss12 = pgboss12System('pgboss12', false);
export const pgboss12Group = pgboss12System('pgboss12-group', true);
