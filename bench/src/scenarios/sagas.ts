import pg from 'pg';
import { spawnChild } from '../harness.js';
import { account, type Measurement } from '../measurement.js';
import type { ChildReport } from '../protocol.js';
import type { ScenarioResult } from '../results.js';
import { BUSINESS_SCHEMA } from '../sagas/billing.js';
import { sagaSystem } from '../sagas/index.js';
import type { SagaShapeId } from '../sagas/types.js';
import {
  sampleServer,
  serverDelta,
  settledXacts,
  withAdmin,
  type ServerSample,
} from '../server.js';
import { installedDatabase } from '../templates.js';
import { quantile } from '../stats.js';
import { labelOf } from '../systems/labels.js';

export interface SagaRunOptions {
  adminUrl: string;
  quick: boolean;
  reps: number;
  log: (line: string) => void;
}

export const SAGA_SYSTEMS = ['skiplock-saga', 'dbos'];
/** Steps per saga: billing's three; the fan-out's invoice, four branches and receipt. */
const STEPS_PER_SAGA: Record<SagaShapeId, number> = { billing: 3, fanout: 6 };

/** Rows inserted, updated or deleted in every table of the database (settled statistics). */
async function rowsWritten(client: pg.Client): Promise<number> {
  const { rows } = await client.query<{ n: string }>(
    `SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::text AS n FROM pg_stat_user_tables`,
  );
  return Number(rows[0]!.n);
}

/** One run of `count` sagas on a fresh database; `inflight` bounds the throughput mode (default 50). */
export async function sagaRun(
  adminUrl: string,
  systemId: string,
  opts: { mode: 'throughput' | 'paced'; count: number; inflight?: number; shape?: SagaShapeId },
): Promise<Measurement> {
  const shape = opts.shape ?? 'billing';
  const system = await sagaSystem(systemId);
  const db = await installedDatabase(adminUrl, `saga:${systemId}`, async (url) => {
    await withAdmin(url, (c) => c.query(BUSINESS_SCHEMA));
    await system.install(url);
  });
  const admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  try {
    const child = spawnChild({
      role: 'saga',
      system: systemId,
      url: db.url,
      mode: opts.mode,
      shape,
      count: opts.count,
      inflight: opts.inflight ?? 50,
      ratePerSecond: 20,
    });
    let report: ChildReport;
    let after: ServerSample;
    try {
      await child.ready;
      await settledXacts(admin, db.name, 1);
      const rowsBefore = await rowsWritten(admin);
      const before = await sampleServer(admin, db.name);
      child.send({ type: 'go' });
      report = await child.report();
      after = await sampleServer(admin, db.name);
      await child.stop();
      const delta = await serverDelta(admin, before, after, await settledXacts(admin, db.name));
      const written = (await rowsWritten(admin)) - rowsBefore;
      const measured = report.measured ?? report.handled;
      const sagasPerSecond = (measured / report.elapsedMs) * 1000;
      return {
        value: sagasPerSecond,
        extra: {
          stepsPerSecond: sagasPerSecond * STEPS_PER_SAGA[shape],
          p50Ms: quantile(report.latencies, 0.5),
          p95Ms: quantile(report.latencies, 0.95),
          p99Ms: quantile(report.latencies, 0.99),
          rowsPerSaga: report.handled > 0 ? written / report.handled : null,
          sagas: measured,
        },
        accounting: account(report.handled, delta, [report]),
        ...(measured < opts.count ? { note: `${opts.count - measured} sagas did not finish` } : {}),
      };
    } finally {
      await child.stop();
    }
  } finally {
    await admin.end();
    await db.drop();
  }
}

/**
 * The same three-step billing saga on skiplock and on DBOS: throughput with 50 sagas in flight,
 * then start-to-finish latency at 20 sagas/s. Accounting is per saga.
 */
export async function runSagas(options: SagaRunOptions): Promise<ScenarioResult> {
  const count = options.quick ? 60 : 300;
  const pacedCount = options.quick ? 20 : 200;
  const scenario: ScenarioResult = {
    id: 'sagas',
    title:
      'Sagas: create invoice → charge (every 10th declined and compensated) → receipt; and a fan-out of four branches',
    metric: 'sagas/s',
    higherIsBetter: true,
    columns: {
      stepsPerSecond: 'steps/s',
      p50Ms: 'p50 ms',
      p95Ms: 'p95 ms',
      p99Ms: 'p99 ms',
      rowsPerSaga: 'rows written/saga',
    },
    rows: [],
    notes: [
      `throughput: ${count.toLocaleString('en-US')} sagas, 50 in flight; 20 sagas/s: ${pacedCount} sagas started one by one at that rate. At 20 sagas/s each engine first runs 20 sagas that are not timed (its connections and prepared statements) but are in the per-saga accounting. Start-to-finish runs from the start call to the commit of the saga's last transaction (skiplock) or to its workflow result (DBOS).`,
      'Both engines run the starter and the step executor in one process and write the same business rows; skiplock runs each step in its own job with the step record and the next job in one transaction (full history kept), DBOS checkpoints each step in its system tables in the same database.',
      'rows written/saga counts inserted, updated and deleted rows of every table (business and engine), so it shows what each engine records per saga; "round trips/job" is per saga here.',
      "fan-out: create invoice → four branches at once (each writes a row; every tenth saga's branch d is declined, and the other three are undone together, then the invoice) → receipt. skiplock runs each branch as its own job (a one-step child saga; the last branch to end moves the saga on); DBOS runs the four steps concurrently inside the workflow with Promise.allSettled.",
    ],
  };
  const configs = [
    { config: 'throughput', mode: 'throughput' as const, count },
    { config: 'fan-out, throughput', mode: 'throughput' as const, count, shape: 'fanout' as const },
    { config: '20 sagas/s', mode: 'paced' as const, count: pacedCount },
  ];
  // Quick runs check that both engines work, in both shapes; the paced latency needs the full run.
  if (options.quick) configs.pop();
  for (const c of configs) {
    const rows = SAGA_SYSTEMS.map((system) => {
      const row = { system, label: labelOf(system), config: c.config, runs: [] as Measurement[] };
      scenario.rows.push(row);
      return row;
    });
    for (let rep = 1; rep <= options.reps; rep++) {
      for (const row of rows) {
        options.log(`sagas · ${c.config} · ${row.system} · repetition ${rep}/${options.reps}`);
        try {
          const m = await sagaRun(options.adminUrl, row.system, c);
          row.runs.push(m);
          options.log(`  → ${m.value?.toFixed(1)} sagas/s, p50 ${m.extra.p50Ms?.toFixed(1)} ms`);
        } catch (error) {
          const message = error instanceof Error ? error.message.split('\n')[0]! : String(error);
          options.log(`  → failed: ${message}`);
          row.runs.push({ value: null, extra: {}, accounting: null, note: `failed: ${message}` });
        }
      }
    }
  }
  return scenario;
}
