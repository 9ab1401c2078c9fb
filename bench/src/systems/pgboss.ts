import PgBoss from 'pg-boss';
import { labelOf } from './labels.js';
import { chunks, type Payload, type QueueSystem } from './types.js';

const QUEUE = 'noop';
const BATCH = 100;

// Enqueue-only instances: no maintenance, no schedules, no migration.
const quiet = { supervise: false, schedule: false, migrate: false } as const;

async function withBoss<T>(url: string, work: (boss: PgBoss) => Promise<T>): Promise<T> {
  const boss = new PgBoss({ connectionString: url, max: 2, ...quiet });
  boss.on('error', (error) => process.stderr.write(`pg-boss: ${String(error)}\n`));
  await boss.start();
  try {
    return await work(boss);
  } finally {
    await boss.stop({ graceful: false, wait: true, timeout: 2_000 });
  }
}

/**
 * pg-boss at its fastest batch settings: each of `concurrency` workers fetches 100 jobs at a time
 * and polls at the 0.5 s minimum.
 */
export const pgboss: QueueSystem = {
  id: 'pgboss',
  label: labelOf('pgboss'),
  async install(url) {
    const boss = new PgBoss({ connectionString: url, max: 2, supervise: false, schedule: false });
    boss.on('error', (error) => process.stderr.write(`pg-boss: ${String(error)}\n`));
    await boss.start();
    await boss.createQueue(QUEUE);
    await boss.stop({ graceful: false, wait: true, timeout: 2_000 });
  },
  async enqueueBulk(url, payloads, chunk) {
    await withBoss(url, async (boss) => {
      for (const part of chunks(payloads, chunk)) {
        await boss.insert(part.map((p) => ({ name: QUEUE, data: p })));
      }
    });
  },
  async producer(url) {
    const boss = new PgBoss({ connectionString: url, max: 2, ...quiet });
    boss.on('error', (error) => process.stderr.write(`pg-boss: ${String(error)}\n`));
    await boss.start();
    return {
      enqueue: async (p) => {
        await boss.send(QUEUE, p);
      },
      enqueueMany: async (ps) => {
        await boss.insert(ps.map((p) => ({ name: QUEUE, data: p })));
      },
      close: () => boss.stop({ graceful: false, wait: true, timeout: 2_000 }),
    };
  },
  async worker({ url, concurrency, onJob, retention }) {
    const boss = new PgBoss({
      connectionString: url,
      max: Math.min(concurrency + 2, 20),
      migrate: false,
      schedule: false,
      supervise: retention === true,
      ...(retention ? { maintenanceIntervalSeconds: 1, archiveCompletedAfterSeconds: 1 } : {}),
    });
    boss.on('error', (error) => process.stderr.write(`pg-boss: ${String(error)}\n`));
    await boss.start();
    return {
      go: async () => {
        for (let i = 0; i < concurrency; i++) {
          await boss.work<Payload>(
            QUEUE,
            { batchSize: BATCH, pollingIntervalSeconds: 0.5 },
            async (jobs) => {
              for (const job of jobs) onJob(job.data);
            },
          );
        }
      },
      stop: () => boss.stop({ graceful: false, wait: true, timeout: 2_000 }),
    };
  },
  remainingSql: `SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'noop' AND state < 'completed'`,
  schema: 'pgboss',
  isClaim: (text) => text.includes('SKIP LOCKED'),
};
