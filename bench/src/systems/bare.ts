import pg from 'pg';
import { labelOf } from './labels.js';
import { chunks, type Payload, type QueueSystem } from './types.js';

const BATCH = 100;

// The seed's table and its two partial indexes, nothing else.
const SCHEMA = `
CREATE SCHEMA bare;
CREATE TYPE bare.job_status AS ENUM ('pending', 'processing', 'completed', 'failed', 'dead');
CREATE TABLE bare.jobs (
  id BIGSERIAL PRIMARY KEY,
  queue TEXT NOT NULL DEFAULT 'default',
  job_type TEXT NOT NULL,
  payload JSONB NOT NULL,
  idempotency_key TEXT,
  status bare.job_status NOT NULL DEFAULT 'pending',
  priority SMALLINT NOT NULL DEFAULT 0,
  attempts INT NOT NULL DEFAULT 0,
  max_attempts INT NOT NULL DEFAULT 5,
  run_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
  locked_at TIMESTAMPTZ,
  locked_by TEXT,
  last_error TEXT,
  completed_at TIMESTAMPTZ,
  created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
  CONSTRAINT uq_queue_idempotency UNIQUE (queue, idempotency_key)
);
CREATE INDEX idx_jobs_pending_claim ON bare.jobs (queue, priority DESC, run_at ASC, id ASC)
  WHERE status = 'pending';
CREATE INDEX idx_jobs_stale_processing ON bare.jobs (locked_at) WHERE status = 'processing';
`;

// The seed's batch claim, ordered as in its production version.
const claimOf = (limit: number) => `
WITH next_jobs AS (
  SELECT id FROM bare.jobs
  WHERE queue = $1 AND status = 'pending' AND run_at <= NOW()
  ORDER BY priority DESC, run_at ASC, id ASC
  FOR UPDATE SKIP LOCKED
  LIMIT ${limit}
)
UPDATE bare.jobs j
SET status = 'processing', locked_at = NOW(), locked_by = $2, attempts = attempts + 1, updated_at = NOW()
FROM next_jobs WHERE j.id = next_jobs.id
RETURNING j.id, j.payload`;
const CLAIM = claimOf(BATCH);

const COMPLETE = `
UPDATE bare.jobs SET status = 'completed', completed_at = NOW(), updated_at = NOW()
WHERE id = ANY($1::bigint[])`;

const INSERT_MANY = `
INSERT INTO bare.jobs (job_type, payload)
SELECT 'noop', p FROM unnest($1::jsonb[]) AS p`;

async function withPool<T>(url: string, work: (pool: pg.Pool) => Promise<T>): Promise<T> {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  try {
    return await work(pool);
  } finally {
    await pool.end();
  }
}

/**
 * The ceiling: the seed's claim of 100 jobs, handlers run at the worker's concurrency, and one
 * completion statement per batch (overlapped with the next claim). No leases, fencing, retries,
 * history, wake-ups or validation.
 */
export const bare: QueueSystem = {
  id: 'bare',
  label: labelOf('bare'),
  async install(url) {
    await withPool(url, (pool) => pool.query(SCHEMA));
  },
  async enqueueBulk(url, payloads, chunk) {
    await withPool(url, async (pool) => {
      for (const part of chunks(payloads, chunk)) {
        await pool.query(INSERT_MANY, [part.map((p) => JSON.stringify(p))]);
      }
    });
  },
  async producer(url) {
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    return {
      enqueue: async (p) => {
        await pool.query(`INSERT INTO bare.jobs (job_type, payload) VALUES ('noop', $1)`, [
          JSON.stringify(p),
        ]);
      },
      enqueueMany: async (ps) => {
        await pool.query(INSERT_MANY, [ps.map((p) => JSON.stringify(p))]);
      },
      close: () => pool.end(),
    };
  },
  async worker({ url, concurrency, onJob }) {
    const pool = new pg.Pool({ connectionString: url, max: 3 });
    await Promise.all([pool.connect(), pool.connect()]).then((cs) =>
      cs.forEach((c) => c.release()),
    );
    const workerId = `bare:${process.pid}`;
    let running = true;
    let idleWake: (() => void) | null = null;
    let loop: Promise<void> | null = null;

    async function runBatch(rows: { payload: Payload }[]): Promise<void> {
      let next = 0;
      const lane = async () => {
        while (next < rows.length) await onJob(rows[next++]!.payload);
      };
      await Promise.all(Array.from({ length: Math.min(concurrency, rows.length) }, lane));
    }

    async function run(): Promise<void> {
      let pending: Promise<unknown> = Promise.resolve();
      while (running) {
        const { rows } = await pool.query<{ id: string; payload: Payload }>(CLAIM, [
          'default',
          workerId,
        ]);
        if (rows.length === 0) {
          await pending;
          // Polls every 10 ms when empty: the baseline has no wake-up channel.
          await new Promise<void>((r) => {
            idleWake = r;
            setTimeout(r, 10);
          });
          continue;
        }
        await runBatch(rows);
        await pending;
        pending = pool.query(COMPLETE, [rows.map((r) => r.id)]);
      }
      await pending;
    }

    return {
      go: async () => {
        loop = run();
      },
      stop: async () => {
        running = false;
        idleWake?.();
        await loop;
        await pool.end();
      },
    };
  },
  remainingSql: `SELECT count(*)::int AS n FROM bare.jobs WHERE status <> 'completed'`,
  schema: 'bare',
  isClaim: (text) => text.includes('FOR UPDATE SKIP LOCKED') && text.includes('bare.jobs j'),
  async claimProbe(url, batch, rounds) {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    const latenciesMs: number[] = [];
    let claimed = 0;
    try {
      const claim = claimOf(batch);
      for (let round = 0; round < rounds; round++) {
        const t0 = performance.now();
        const { rows } = await client.query<{ id: string }>(claim, ['default', 'bare:probe']);
        // A claim that found nothing is not timed, as skiplock's probe times only claims that
        // returned a job.
        if (rows.length === 0) continue;
        latenciesMs.push(performance.now() - t0);
        claimed += rows.length;
        await client.query(COMPLETE, [rows.map((r) => r.id)]);
      }
    } finally {
      await client.end();
    }
    return { latenciesMs, claimed };
  },
};

export const BARE_SCHEMA_SQL = SCHEMA;
