import pg from 'pg';
import { spawnChild, sleep, type ChildHandle } from '../harness.js';
import { account, type Measurement } from '../measurement.js';
import type { ChildReport } from '../protocol.js';
import {
  freshDatabase,
  sampleServer,
  serverDelta,
  settledXacts,
  type FreshDatabase,
  type ServerSample,
} from '../server.js';
import { quantile } from '../stats.js';
import { installedDatabase } from '../templates.js';
import { queueSystem } from '../systems/index.js';
import { sharedClockMs, type Payload, type QueueSystem } from '../systems/types.js';

export interface RunContext {
  adminUrl: string;
}

const payloads = (n: number): Payload[] => Array.from({ length: n }, (_, i) => ({ i, t: 0 }));

async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  return client;
}

async function remaining(client: pg.Client, system: QueueSystem): Promise<number> {
  const { rows } = await client.query<{ n: number }>(system.remainingSql);
  return rows[0]!.n;
}

/** A database with the system installed and, optionally, jobs already queued. */
export async function preparedDatabase(
  ctx: RunContext,
  system: QueueSystem,
  queued: number,
  template?: string,
): Promise<FreshDatabase> {
  if (template) return freshDatabase(ctx.adminUrl, template);
  const db = await installedDatabase(ctx.adminUrl, system.id, (url) => system.install(url));
  if (queued > 0) {
    await system.enqueueBulk(db.url, payloads(queued), 1_000);
    const client = await connect(db.url);
    await client.query('ANALYZE').finally(() => client.end());
  }
  return db;
}

async function startWorkers(
  url: string,
  systemId: string,
  processes: number,
  concurrency: number,
  extra: { latency?: boolean; retention?: boolean } = {},
): Promise<ChildHandle[]> {
  const children = Array.from({ length: processes }, () =>
    spawnChild({ role: 'worker', system: systemId, url, concurrency, ...extra }),
  );
  try {
    await Promise.all(children.map((c) => c.ready));
  } catch (error) {
    await Promise.all(children.map((c) => c.stop(1_000)));
    throw error;
  }
  return children;
}

async function finish(children: ChildHandle[]): Promise<ChildReport[]> {
  try {
    return await Promise.all(children.map((c) => c.report()));
  } finally {
    await Promise.all(children.map((c) => c.stop()));
  }
}

/**
 * Samples, back to back on its own connection while a drain runs, the most jobs of one key (or
 * group) the system shows running at one instant: above the limit is overshoot.
 */
async function perKeySampler(url: string, system: QueueSystem) {
  const sql = system.mostActivePerKeySql;
  if (!sql) throw new Error(`${system.id} cannot report jobs running per key`);
  const client = await connect(url);
  let running = true;
  let loop: Promise<void> = Promise.resolve();
  const state = {
    most: 0,
    samples: 0,
    start() {
      loop = (async () => {
        while (running) {
          const { rows } = await client.query<{ n: number }>(sql);
          state.most = Math.max(state.most, rows[0]!.n);
          state.samples += 1;
        }
      })();
    },
    async stop() {
      if (!running) return;
      running = false;
      await loop.finally(() => client.end());
    },
  };
  return state;
}

/**
 * Claims of each size the probe makes before it times any. PostgreSQL plans a named prepared
 * statement afresh for its first 5 executions and may switch to a generic plan on the 6th, so
 * the timed claims start after that switch.
 */
export const PROBE_WARMUP = 6;

/**
 * Times claims of each size in `batches`, `rounds` of each, with the system's `claimProbe` from
 * this process before the drain starts. Extras `probe<size>P50Ms` and `probe<size>P95Ms`.
 */
async function probeClaims(
  system: QueueSystem,
  url: string,
  { batches, rounds }: { batches: readonly number[]; rounds: number },
): Promise<{ extra: Record<string, number | null>; claimed: number }> {
  if (!system.claimProbe) throw new Error(`${system.id} has no claim probe`);
  const extra: Record<string, number | null> = {};
  let claimed = 0;
  for (const batch of batches) {
    const probe = await system.claimProbe(url, batch, rounds + PROBE_WARMUP);
    const timed = probe.latenciesMs.slice(PROBE_WARMUP);
    extra[`probe${batch}P50Ms`] = quantile(timed, 0.5);
    extra[`probe${batch}P95Ms`] = quantile(timed, 0.95);
    claimed += probe.claimed;
  }
  return { extra, claimed };
}

/**
 * Drains `jobs` queued jobs with worker processes; the clock runs from `go` until the database
 * shows every job settled (a handler run is not enough: the completion must be committed).
 * With `probe`, claims are timed on their own first (`probeClaims`), and the drain is of the jobs
 * they left.
 */
export async function drainRun(
  ctx: RunContext,
  systemId: string,
  opts: {
    jobs: number;
    processes: number;
    concurrency: number;
    timeoutMs: number;
    template?: string;
    /** Sample the most jobs of one key running at once, on a connection of its own. */
    samplePerKey?: boolean;
    probe?: { batches: readonly number[]; rounds: number };
  },
): Promise<Measurement & { claimLatencies: number[] }> {
  const system = await queueSystem(systemId);
  const db = await preparedDatabase(ctx, system, opts.template ? 0 : opts.jobs, opts.template);
  const admin = await connect(db.url);
  const sampler = opts.samplePerKey ? await perKeySampler(db.url, system) : null;
  try {
    const probed = opts.probe ? await probeClaims(system, db.url, opts.probe) : null;
    const jobs = opts.jobs - (probed?.claimed ?? 0);
    const children = await startWorkers(db.url, systemId, opts.processes, opts.concurrency);
    let reports: ChildReport[];
    let done = jobs;
    let elapsedMs: number;
    let after: ServerSample;
    const before = await sampleServer(admin, db.name);
    const t0 = performance.now();
    try {
      for (const c of children) c.send({ type: 'go' });
      sampler?.start();
      const deadline = t0 + opts.timeoutMs;
      // Handler counts come over IPC (cheap); the database is asked only near the end.
      while (children.reduce((n, c) => n + c.handled, 0) < jobs) {
        if (performance.now() > deadline) break;
        await sleep(20);
      }
      while (performance.now() <= deadline) {
        const left = await remaining(admin, system);
        if (left === 0) break;
        await sleep(5);
      }
      elapsedMs = performance.now() - t0;
      await sampler?.stop();
      done = jobs - (await remaining(admin, system));
      after = await sampleServer(admin, db.name);
    } finally {
      reports = await finish(children);
    }
    const delta = await serverDelta(admin, before, after, await settledXacts(admin, db.name));
    const claimLatencies = reports.flatMap((r) => r.claimLatencies);
    return {
      value: (done / elapsedMs) * 1000,
      extra: {
        jobs: done,
        seconds: elapsedMs / 1000,
        claimWaitP50Ms: quantile(claimLatencies, 0.5),
        claimWaitP95Ms: quantile(claimLatencies, 0.95),
        claims: claimLatencies.length,
        jobsPerClaim: claimLatencies.length > 0 ? done / claimLatencies.length : null,
        ...probed?.extra,
        ...(sampler ? { mostPerKey: sampler.most, perKeySamples: sampler.samples } : {}),
      },
      accounting: account(done, delta, reports),
      claimLatencies,
      ...(done < jobs
        ? { note: `stopped at the ${opts.timeoutMs / 1000} s limit after ${done} jobs` }
        : {}),
    };
  } finally {
    await sampler?.stop();
    await admin.end();
    await db.drop();
  }
}

/** Enqueues `count` jobs from a fresh process, in chunks (bulk) or one per call (single). */
export async function enqueueRun(
  ctx: RunContext,
  systemId: string,
  opts: { mode: 'bulk' | 'single'; count: number; chunk: number },
): Promise<Measurement> {
  const system = await queueSystem(systemId);
  const db = await preparedDatabase(ctx, system, 0);
  const admin = await connect(db.url);
  try {
    const child = spawnChild({ role: 'enqueue', system: systemId, url: db.url, ...opts });
    let report: ChildReport;
    let after: ServerSample;
    await child.ready;
    const before = await sampleServer(admin, db.name);
    try {
      child.send({ type: 'go' });
      report = await child.report();
      after = await sampleServer(admin, db.name);
    } finally {
      await child.stop();
    }
    const delta = await serverDelta(admin, before, after, await settledXacts(admin, db.name));
    return {
      value: (opts.count / report.elapsedMs) * 1000,
      extra: { jobs: opts.count, seconds: report.elapsedMs / 1000 },
      accounting: account(opts.count, delta, [report]),
    };
  } finally {
    await admin.end();
    await db.drop();
  }
}

/**
 * One job at a time at `ratePerSecond` to an idle worker (defaults, concurrency 10): the time from
 * just before the enqueue call to the handler's first line, across processes on one clock.
 */
export async function latencyRun(
  ctx: RunContext,
  systemId: string,
  opts: { jobs: number; warmup: number; ratePerSecond: number },
): Promise<Measurement> {
  const system = await queueSystem(systemId);
  const db = await preparedDatabase(ctx, system, 0);
  const admin = await connect(db.url);
  const producer = await system.producer(db.url);
  try {
    const [child] = await startWorkers(db.url, systemId, 1, 10, { latency: true });
    const total = opts.jobs + opts.warmup;
    let report: ChildReport;
    let after: ServerSample;
    const before = await sampleServer(admin, db.name);
    try {
      child!.send({ type: 'go' });
      // Let the worker reach its idle wait before the first job, as in production.
      await sleep(300);
      const interval = 1000 / opts.ratePerSecond;
      const start = performance.now();
      for (let i = 0; i < total; i++) {
        const due = start + i * interval;
        const wait = due - performance.now();
        if (wait > 0) await sleep(wait);
        await producer.enqueue({ i, t: sharedClockMs() });
      }
      const deadline = performance.now() + 10_000;
      while (child!.handled < total && performance.now() < deadline) await sleep(10);
      after = await sampleServer(admin, db.name);
    } finally {
      report = (await finish([child!]))[0]!;
    }
    await producer.close();
    const delta = await serverDelta(admin, before, after, await settledXacts(admin, db.name));
    const measured = report.latencies.slice(opts.warmup);
    return {
      value: quantile(measured, 0.5),
      extra: {
        p50Ms: quantile(measured, 0.5),
        p95Ms: quantile(measured, 0.95),
        p99Ms: quantile(measured, 0.99),
        jobs: measured.length,
      },
      accounting: account(report.handled, delta, [report]),
      ...(report.handled < total ? { note: `${total - report.handled} jobs never started` } : {}),
    };
  } finally {
    await producer.close().catch(() => {});
    await admin.end();
    await db.drop();
  }
}

export interface TableSizes {
  tableBytes: number;
  indexBytes: number;
  deadTuples: number;
  liveTuples: number;
}

export async function schemaSizes(client: pg.Client, schema: string): Promise<TableSizes> {
  const { rows } = await client.query<Record<keyof TableSizes, string>>(
    `SELECT coalesce(sum(pg_table_size(relid)), 0)::text AS "tableBytes",
            coalesce(sum(pg_indexes_size(relid)), 0)::text AS "indexBytes",
            coalesce(sum(n_dead_tup), 0)::text AS "deadTuples",
            coalesce(sum(n_live_tup), 0)::text AS "liveTuples"
     FROM pg_stat_user_tables WHERE schemaname = $1`,
    [schema],
  );
  const r = rows[0]!;
  return {
    tableBytes: Number(r.tableBytes),
    indexBytes: Number(r.indexBytes),
    deadTuples: Number(r.deadTuples),
    liveTuples: Number(r.liveTuples),
  };
}

/**
 * Churn: `jobs` jobs enqueued in chunks of 1,000 by one process while one worker process
 * (concurrency 10, retention on) drains them; then the system's tables are measured.
 */
export async function churnRun(
  ctx: RunContext,
  systemId: string,
  opts: { jobs: number; timeoutMs: number },
): Promise<Measurement> {
  const system = await queueSystem(systemId);
  const db = await preparedDatabase(ctx, system, 0);
  const admin = await connect(db.url);
  try {
    const workers = await startWorkers(db.url, systemId, 1, 10, { retention: true });
    const producer = spawnChild({
      role: 'enqueue',
      system: systemId,
      url: db.url,
      mode: 'bulk',
      count: opts.jobs,
      chunk: 1_000,
    });
    let reports: ChildReport[] = [];
    const before = await sampleServer(admin, db.name);
    const t0 = performance.now();
    let elapsedMs: number;
    let after: ServerSample;
    try {
      await producer.ready;
      for (const c of [...workers, producer]) c.send({ type: 'go' });
      const produced = await producer.report();
      reports.push(produced);
      const deadline = t0 + opts.timeoutMs;
      while (workers[0]!.handled < opts.jobs && performance.now() < deadline) await sleep(20);
      while ((await remaining(admin, system)) > 0 && performance.now() < deadline) await sleep(10);
      elapsedMs = performance.now() - t0;
      after = await sampleServer(admin, db.name);
    } finally {
      await producer.stop();
      reports = [...reports, ...(await finish(workers))];
    }
    const delta = await serverDelta(admin, before, after, await settledXacts(admin, db.name));
    // The statistics collector publishes counts at most once a second.
    await sleep(1_200);
    const sizes = await schemaSizes(admin, system.schema);
    const done = workers.reduce((n, w) => n + w.handled, 0);
    return {
      value: (sizes.tableBytes + sizes.indexBytes) / 1024 / 1024,
      extra: {
        tableMiB: sizes.tableBytes / 1024 / 1024,
        indexMiB: sizes.indexBytes / 1024 / 1024,
        deadTuples: sizes.deadTuples,
        liveTuples: sizes.liveTuples,
        jobsPerSecond: (done / elapsedMs) * 1000,
      },
      accounting: account(done, delta, reports),
      ...(done < opts.jobs ? { note: `only ${done} of ${opts.jobs} jobs ran in time` } : {}),
    };
  } finally {
    await admin.end();
    await db.drop();
  }
}
