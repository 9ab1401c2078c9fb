import { interleaved } from '../interleave.js';
import type { ScenarioResult } from '../results.js';
import { buildBigTable } from './big-table.js';
import { PROBE_WARMUP, drainRun } from './queue-runs.js';
import { SAGA_SYSTEMS, sagaRun } from './sagas.js';

/**
 * Cost curves: how skiplock's figures move as the work grows along one axis at a time (rows in
 * the table, worker processes on one server, sagas in flight), each a table and a chart.
 */
export interface CurveOptions {
  adminUrl: string;
  quick: boolean;
  reps: number;
  log: (line: string) => void;
}

const claimPanels = (omitFromRate: string[] = []) => [
  { key: 'value', title: 'jobs/s', omit: omitFromRate },
  { key: 'claimWaitP50Ms', title: 'claim wait p50 ms' },
  { key: 'claimWaitP95Ms', title: 'claim wait p95 ms' },
];

/**
 * Claims timed on their own before a drain on the seed's shape (`drainRun`'s `probe`): of the
 * seed's 100 jobs, and of 500, about what skiplock's worker claims per refill in these drains.
 */
export const CLAIM_PROBE = { batches: [100, 500], rounds: 40 } as const;
/** The probe on the 20 k-row table, whose 2,000 pending jobs must leave some to drain. */
const SMALL_PROBE = { batches: [100], rounds: 8 } as const;
export const CLAIM_PROBE_COLUMNS = {
  probe100P50Ms: 'claim of 100 p50 ms',
  probe100P95Ms: 'claim of 100 p95 ms',
  probe500P50Ms: 'claim of 500 p50 ms',
  probe500P95Ms: 'claim of 500 p95 ms',
};
/** What the probe columns are, for the notes of the scenarios that have them. */
export const CLAIM_WAIT_NOTE =
  '"claim wait": the drain\'s own claims, from sending each to the worker having its rows, which includes waiting for the worker\'s event loop, busy with the jobs claimed before.';
export const CLAIM_PROBE_NOTE = `"claim of 100" and "claim of 500": before each drain, the system's own claim of that many jobs, ${CLAIM_PROBE.rounds} times one after the other (after ${PROBE_WARMUP} not timed) from a process doing nothing else, each batch completed before the next; from sending the claim to having its rows: the claim's cost on this table. ${CLAIM_WAIT_NOTE}`;

/** The seed's shape (90 % completed) at 20 k, 2 M and 10 M rows, drained by 1 process × 10. */
export async function tableSizeCurve(o: CurveOptions): Promise<ScenarioResult> {
  const sizes = [
    { config: '20 k rows', total: 20_000 },
    { config: '2 M rows', total: 2_000_000 },
    { config: '10 M rows', total: 10_000_000 },
  ];
  const timeoutMs = 10_000;
  const s: ScenarioResult = {
    id: 'table-size',
    title:
      'Cost curve: rows in the table (90 % completed, 10 % pending), drained by 1 process × 10',
    metric: 'jobs/s',
    higherIsBetter: true,
    columns: {
      claimWaitP50Ms: 'claim wait p50 ms',
      claimWaitP95Ms: 'claim wait p95 ms',
      jobsPerClaim: 'jobs/claim',
      ...CLAIM_PROBE_COLUMNS,
    },
    rows: [],
    notes: [
      `Each size is built once (rows written in SQL, oldest first, then VACUUM ANALYZE) and cloned per repetition; the worker drains what the claim probe left of the pending tenth for up to ${timeoutMs / 1000} s. The 2 M and 10 M rows are rates over that window; the 20 k row is a whole drain of the ${(2_000 - 100 * (SMALL_PROBE.rounds + PROBE_WARMUP)).toLocaleString('en-US')} jobs the probe leaves, mostly the worker's start (its first claims are small until it has seen how fast handlers finish), so the chart leaves it out of the jobs/s panel and keeps its claim latencies.`,
      `${CLAIM_PROBE_NOTE} At 20 k rows (2,000 pending) the probe times ${SMALL_PROBE.rounds} claims of 100 (after ${PROBE_WARMUP} not timed) and none of 500, so that jobs are left to drain; its p95 is the largest of those ${SMALL_PROBE.rounds}, so the chart's p95 panel leaves it out and its p50 panel keeps it.`,
    ],
    charts: [
      {
        file: 'curve-table-size.png',
        title: 'Drain and claim latency as the table grows (skiplock, 1 process × 10)',
        xTitle: 'rows in skiplock.jobs (log scale)',
        panels: [
          { key: 'value', title: 'jobs/s', omit: ['20 k rows'] },
          { key: 'probe100P50Ms', title: 'claim of 100 p50 ms' },
          { key: 'probe100P95Ms', title: 'claim of 100 p95 ms', omit: ['20 k rows'] },
          { key: 'probe500P95Ms', title: 'claim of 500 p95 ms', omit: ['20 k rows'] },
        ],
        xValues: Object.fromEntries(sizes.map((size) => [size.config, size.total])),
        xLog: true,
      },
    ],
  };
  for (const size of sizes) {
    const pending = size.total / 10;
    o.log(`table-size · building ${size.config}`);
    const table = await buildBigTable(o.adminUrl, 'skiplock', {
      completed: size.total - pending,
      pending,
    });
    try {
      await interleaved(
        s,
        size.config,
        ['skiplock'],
        (system) =>
          drainRun({ adminUrl: o.adminUrl }, system, {
            jobs: pending,
            processes: 1,
            concurrency: 10,
            timeoutMs,
            template: table.template,
            probe: size.total > 20_000 ? CLAIM_PROBE : SMALL_PROBE,
          }),
        { repetitions: o.reps, log: o.log },
      );
    } finally {
      await table.drop();
    }
  }
  return s;
}

const processLabel = (n: number) => `${n} process${n === 1 ? '' : 'es'}`;

/** 20,000 queued jobs drained by 1, 2, 4 and 8 worker processes (concurrency 10 each). */
export async function processCurve(o: CurveOptions): Promise<ScenarioResult> {
  const jobs = o.quick ? 1_000 : 20_000;
  const counts = o.quick ? [1, 2] : [1, 2, 4, 8];
  const systems = o.quick ? ['skiplock'] : ['skiplock', 'bare'];
  const s: ScenarioResult = {
    id: 'processes',
    title: `Cost curve: worker processes against one server, ${jobs.toLocaleString('en-US')} queued jobs, concurrency 10 each`,
    metric: 'jobs/s',
    higherIsBetter: true,
    columns: {
      claimWaitP50Ms: 'claim wait p50 ms',
      claimWaitP95Ms: 'claim wait p95 ms',
      jobsPerClaim: 'jobs/claim',
    },
    rows: [],
    notes: [
      'Every process claims from the same table with SKIP LOCKED; the machine has the cores its header says, shared by the workers and PostgreSQL.',
      CLAIM_WAIT_NOTE,
    ],
    charts: [
      {
        file: 'curve-processes.png',
        title: 'Drain as worker processes are added (concurrency 10 each, one server)',
        xTitle: 'worker processes',
        panels: claimPanels(),
        xValues: Object.fromEntries(counts.map((n) => [processLabel(n), n])),
      },
    ],
  };
  for (const processes of counts) {
    await interleaved(
      s,
      processLabel(processes),
      systems,
      (system) =>
        drainRun({ adminUrl: o.adminUrl }, system, {
          jobs,
          processes,
          concurrency: 10,
          timeoutMs: 10_000,
        }),
      { repetitions: o.reps, log: o.log },
    );
  }
  return s;
}

/** The benchmark's 3-step saga with 10, 50 and 200 in flight, skiplock next to DBOS. */
export async function sagaInflightCurve(o: CurveOptions): Promise<ScenarioResult> {
  const levels = o.quick ? [10] : [10, 50, 200];
  // Enough sagas that the steady state outweighs the ramp up and down at every level.
  const countAt = (inflight: number) => (o.quick ? 40 : Math.max(400, 5 * inflight));
  const systems = o.quick ? ['skiplock-saga'] : SAGA_SYSTEMS;
  const s: ScenarioResult = {
    id: 'saga-inflight',
    title: `Cost curve: sagas in flight, the benchmark's 3-step saga (${levels.map((n) => `${countAt(n)} sagas at ${n}`).join(', ')})`,
    metric: 'sagas/s',
    higherIsBetter: true,
    columns: { p50Ms: 'p50 ms', p95Ms: 'p95 ms', rowsPerSaga: 'rows written/saga' },
    rows: [],
    notes: [
      'The saga of the sagas scenario (every 10th charge declined and compensated); the starter keeps the stated number of sagas unfinished at once, and both engines execute steps with 10 at a time in one process. p50/p95 are start-to-finish.',
    ],
    charts: [
      {
        file: 'curve-saga-inflight.png',
        title: 'Saga throughput and start-to-finish latency as more sagas are in flight',
        xTitle: 'sagas in flight (log scale)',
        xValues: Object.fromEntries(levels.map((n) => [`${n} in flight`, n])),
        xLog: true,
        panels: [
          { key: 'value', title: 'sagas/s' },
          { key: 'p50Ms', title: 'start-to-finish p50 ms' },
          { key: 'p95Ms', title: 'start-to-finish p95 ms' },
        ],
      },
    ],
  };
  for (const inflight of levels) {
    await interleaved(
      s,
      `${inflight} in flight`,
      systems,
      (system) =>
        sagaRun(o.adminUrl, system, { mode: 'throughput', count: countAt(inflight), inflight }),
      { repetitions: o.reps, log: o.log },
    );
  }
  return s;
}
