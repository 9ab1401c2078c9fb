import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { commitLatencyMs, cpuVisible, resolveServer, serverSettings } from './server.js';
import { renderMarkdown } from './report.js';
import type { BenchResults, ScenarioResult } from './results.js';
import { buildBigTable, tableOf } from './scenarios/big-table.js';
import { churnRun, drainRun, enqueueRun, latencyRun } from './scenarios/queue-runs.js';
import { runSagas } from './scenarios/sagas.js';
import { DIRECT, RELAY, runRelay } from './scenarios/relay.js';
import {
  CLAIM_PROBE,
  CLAIM_PROBE_COLUMNS,
  CLAIM_PROBE_NOTE,
  processCurve,
  sagaInflightCurve,
  tableSizeCurve,
} from './scenarios/curves.js';
import { renderCharts } from './charts.js';
import { evaluateTargets } from './targets.js';
import { dropTemplates } from './templates.js';
import { interleaved as interleave } from './interleave.js';
import type { Measurement } from './measurement.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    reps: { type: 'string' },
    only: { type: 'string' },
    out: { type: 'string' },
  },
});

const quick = args.quick === true;
const reps = args.reps ? Number(args.reps) : quick ? 1 : 3;
if (!Number.isInteger(reps) || reps < 1 || reps > 20) {
  throw new Error(`--reps must be an integer from 1 to 20, got ${args.reps}`);
}
const only = args.only ? new Set(args.only.split(',')) : null;
const KNOWN = [
  'drain',
  'enqueue',
  'latency',
  'big-table',
  'sagas',
  'churn',
  'processes',
  'saga-inflight',
  'table-size',
  'keys',
  'relay',
  'tracing',
];
for (const name of only ?? []) {
  if (!KNOWN.includes(name))
    throw new Error(`--only: unknown scenario "${name}" (${KNOWN.join(', ')})`);
}
const wanted = (id: string) => !only || only.has(id);
const benchRoot = fileURLToPath(new URL('..', import.meta.url));
// Quick runs (CI, development) never overwrite the committed full results.
const outDir = args.out ?? `${benchRoot}results${quick ? '/quick' : ''}`;

const log = (line: string) =>
  process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${line}\n`);

const plan = {
  drainJobs: quick ? 1_000 : 20_000,
  drainConfigs: quick
    ? [{ config: '1 process × 10', processes: 1, concurrency: 10 }]
    : [
        { config: '1 process × 1', processes: 1, concurrency: 1 },
        { config: '1 process × 10', processes: 1, concurrency: 10 },
        { config: '1 process × 50', processes: 1, concurrency: 50 },
        { config: '2 processes × 10', processes: 2, concurrency: 10 },
      ],
  drainTimeoutMs: 10_000,
  bulkJobs: quick ? 2_000 : 20_000,
  singleJobs: quick ? 100 : 1_000,
  latencyJobs: quick ? 15 : 200,
  latencyWarmup: quick ? 5 : 20,
  churnJobs: quick ? 1_000 : 200_000,
  bigTable: { completed: 1_800_000, pending: 200_000 },
  keysJobs: quick ? 2_000 : 20_000,
};

// Quick runs (CI) drive every adapter at least once, with the fewest runs that do so.
const TRACING_SYSTEMS = ['skiplock-untraced', 'skiplock', 'skiplock-otel'];
const DRAIN_SYSTEMS = ['skiplock', 'skiplock-sync', 'bare', 'graphile', 'graphile-lq', 'pgboss'];
const ENQUEUE_SYSTEMS = ['skiplock', 'bare', 'graphile', 'pgboss'];
const SINGLE_ENQUEUE_SYSTEMS = quick ? ['skiplock', 'bare'] : ENQUEUE_SYSTEMS;
const LATENCY_SYSTEMS = quick
  ? ['skiplock', 'skiplock-poll', 'graphile']
  : ['skiplock', 'skiplock-unprepared', 'skiplock-poll', 'graphile', 'graphile-lq', 'pgboss'];
const CHURN_SYSTEMS = quick ? ['skiplock'] : ['skiplock', 'graphile', 'pgboss'];
// skiplock-sync waits for the WAL flush on its claims, as bare SQL's claim does: the like-for-like
// figure beside skiplock's default. skiplock-poll (listen: false) claims on its pool, planned on
// every call, where the default claims on its LISTEN connection with a generic plan.
const BIG_TABLE_SYSTEMS = [
  'skiplock',
  'skiplock-poll',
  'skiplock-sync',
  'skiplock-unprepared',
  'bare',
];

/**
 * `pnpm bench` builds the packages and runs without the `skiplock-source` condition, so skiplock
 * is measured as npm installs it (its `dist/` JavaScript), as the peers are. Through tsx the
 * sources carry esbuild's `__name` wrapper on every function and closure they create, and cost
 * more Node CPU per job: 0.037 and 0.043 against 0.033 ms in the drain at concurrency 10 (two
 * side-by-side runs each; bench/README.md, "What changed since the previous committed run").
 */
function skiplockCode(): string {
  const entry = import.meta.resolve('@skiplock/queue');
  if (entry.includes('/dist/')) return 'built JavaScript (`dist/`, as installed from npm)';
  return 'TypeScript sources through tsx (the `skiplock-source` condition is set)';
}

function packageVersion(name: string): string {
  try {
    const file = `${benchRoot}node_modules/${name}/package.json`;
    return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
  } catch {
    return 'not installed';
  }
}

const interleaved = (
  scenario: ScenarioResult,
  config: string,
  systems: readonly string[],
  measure: (system: string) => Promise<Measurement>,
  repetitions = reps,
) => interleave(scenario, config, systems, measure, { repetitions, log });

// Interrupted runs still drop their template databases.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    log(`${signal}: dropping template databases`);
    void dropTemplates().finally(() => process.exit(130));
  });
}

async function main(): Promise<void> {
  const startedAt = new Date().toISOString();
  const server = await resolveServer(log);
  const adminUrl = server.adminUrl;
  log(`PostgreSQL from ${server.source}; ${reps} repetition(s); ${quick ? 'quick' : 'full'} run`);
  const settings = await serverSettings(adminUrl);
  const loadBefore = os.loadavg();
  const commitBefore = await commitLatencyMs(adminUrl);
  log(
    `one-row commit takes ${commitBefore.toFixed(2)} ms (median); load average ${loadBefore[0]!.toFixed(2)}`,
  );
  const ctx = { adminUrl };
  const scenarios: ScenarioResult[] = [];
  let commitAfter: number | null = null;
  try {
    if (wanted('drain')) {
      const s: ScenarioResult = {
        id: 'drain',
        title: `Drain: ${plan.drainJobs.toLocaleString('en-US')} queued jobs, no-op handler`,
        metric: 'jobs/s',
        higherIsBetter: true,
        columns: {},
        rows: [],
        notes: [
          'Jobs are enqueued in bulk before the workers start; the clock runs from start until the database shows every job settled.',
          `A run stops at ${plan.drainTimeoutMs / 1000} s; its rate then counts the jobs settled so far.`,
        ],
      };
      scenarios.push(s);
      for (const c of plan.drainConfigs) {
        await interleaved(s, c.config, DRAIN_SYSTEMS, (system) =>
          drainRun(ctx, system, { jobs: plan.drainJobs, timeoutMs: plan.drainTimeoutMs, ...c }),
        );
      }
    }
    if (wanted('enqueue')) {
      const s: ScenarioResult = {
        id: 'enqueue',
        title: 'Enqueue',
        metric: 'jobs/s',
        higherIsBetter: true,
        columns: {},
        rows: [],
        notes: [
          `bulk: ${plan.bulkJobs.toLocaleString('en-US')} jobs in chunks of 1,000 (one call per chunk); single: ${plan.singleJobs.toLocaleString('en-US')} jobs, one call after the other, each in its own transaction.`,
        ],
      };
      scenarios.push(s);
      await interleaved(s, 'bulk, chunks of 1,000', ENQUEUE_SYSTEMS, (system) =>
        enqueueRun(ctx, system, { mode: 'bulk', count: plan.bulkJobs, chunk: 1_000 }),
      );
      await interleaved(s, 'single, sequential', SINGLE_ENQUEUE_SYSTEMS, (system) =>
        enqueueRun(ctx, system, { mode: 'single', count: plan.singleJobs, chunk: 1 }),
      );
    }
    if (wanted('latency')) {
      const s: ScenarioResult = {
        id: 'latency',
        title: 'Latency: one job at a time at 50/s to an idle worker (concurrency 10)',
        metric: 'p50 ms',
        higherIsBetter: false,
        columns: { p95Ms: 'p95 ms', p99Ms: 'p99 ms' },
        rows: [],
        notes: [
          `${plan.latencyJobs} measured jobs after ${plan.latencyWarmup} warm-up jobs; enqueue-to-handler-start across processes on one clock (the system's monotonic clock, process.hrtime).`,
          'pg-boss has no wake-up on enqueue; its workers poll at the 0.5 s minimum.',
          'skiplock (listen: false) is the setting for PgBouncer in transaction mode: no LISTEN connection, the worker polls every 1 s ± 25% (its default pollIntervalMs), so a job waits about half a poll interval.',
        ],
      };
      scenarios.push(s);
      await interleaved(s, '50 jobs/s', LATENCY_SYSTEMS, (system) =>
        latencyRun(ctx, system, {
          jobs: plan.latencyJobs,
          warmup: plan.latencyWarmup,
          ratePerSecond: 50,
        }),
      );
    }
    if (wanted('big-table') && !quick) {
      const { completed, pending } = plan.bigTable;
      const s: ScenarioResult = {
        id: 'big-table',
        title: `The seed's table shape: ${((completed + pending) / 1e6).toFixed(1)} M rows (${completed.toLocaleString('en-US')} completed, ${pending.toLocaleString('en-US')} pending), drained by 1 process × 10`,
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
          CLAIM_PROBE_NOTE,
          'Graphile Worker and pg-boss delete or archive finished jobs, so this shape is not theirs; the bare SQL baseline runs on the same shape.',
        ],
      };
      scenarios.push(s);
      const templates = new Map<string, { template: string; drop: () => Promise<void> }>();
      try {
        for (const table of new Set(BIG_TABLE_SYSTEMS.map(tableOf))) {
          log(`big-table · building ${table}'s table`);
          templates.set(table, await buildBigTable(adminUrl, table, plan.bigTable));
        }
        await interleaved(s, '1 process × 10', BIG_TABLE_SYSTEMS, (system) =>
          drainRun(ctx, system, {
            jobs: pending,
            processes: 1,
            concurrency: 10,
            timeoutMs: 60_000,
            template: templates.get(tableOf(system))!.template,
            probe: CLAIM_PROBE,
          }),
        );
      } finally {
        for (const t of templates.values()) await t.drop();
      }
    }
    if (wanted('keys')) {
      const s: ScenarioResult = {
        id: 'keys',
        title: `Drain with concurrency keys: ${plan.keysJobs.toLocaleString('en-US')} jobs over 1,000 keys, limit 1 per key, 2 processes × 10`,
        metric: 'jobs/s',
        higherIsBetter: true,
        columns: {
          mostPerKey: 'most of a key at once',
          perKeySamples: 'samples',
        },
        rows: [],
        notes: [
          'Job i has key k<i mod 1000>. skiplock-keyed names it with concurrencyKey (limit 1); pg-boss 12 puts the job in that group and its workers fetch with groupConcurrency 1 (limit across all nodes). skiplock (defaults) and pg-boss 12 without groups drain the same jobs unlimited.',
          '"most of a key at once" is the largest number of jobs of one key the database showed running (skiplock: processing, pg-boss: active), sampled back to back on a separate connection during the drain; above 1 is overshoot. The sampling connection is the same load for both.',
        ],
      };
      scenarios.push(s);
      await interleaved(
        s,
        '2 processes × 10',
        ['skiplock', 'skiplock-keyed', 'pgboss12', 'pgboss12-group'],
        (system) =>
          drainRun(ctx, system, {
            jobs: plan.keysJobs,
            processes: 2,
            concurrency: 10,
            timeoutMs: quick ? 10_000 : 30_000,
            samplePerKey: system === 'skiplock-keyed' || system === 'pgboss12-group',
          }),
      );
    }
    if (wanted('tracing')) {
      const s: ScenarioResult = {
        id: 'tracing',
        title: 'Tracing: the cost of OpenTelemetry per job, off, with no SDK, and recording',
        metric: 'jobs/s',
        higherIsBetter: true,
        columns: {},
        rows: [],
        notes: [
          'skiplock (defaults) calls the OpenTelemetry API with no SDK registered, as every user without one does; `tracing: false` skips the API altogether. The row with an SDK records every enqueue and run span (BatchSpanProcessor, exporting nowhere).',
          `drain: ${plan.drainJobs.toLocaleString('en-US')} queued jobs, 1 process × 10; single: ${plan.singleJobs.toLocaleString('en-US')} enqueues one after the other.`,
        ],
      };
      scenarios.push(s);
      await interleaved(s, 'drain, 1 process × 10', TRACING_SYSTEMS, (system) =>
        drainRun(ctx, system, {
          jobs: plan.drainJobs,
          timeoutMs: plan.drainTimeoutMs,
          processes: 1,
          concurrency: 10,
        }),
      );
      await interleaved(s, 'single, sequential', TRACING_SYSTEMS, (system) =>
        enqueueRun(ctx, system, { mode: 'single', count: plan.singleJobs, chunk: 1 }),
      );
    }
    // NATS JetStream and RabbitMQ on this machine; without them (and outside CI) the rows say why.
    if (wanted('relay')) scenarios.push(...(await runRelay({ adminUrl, quick, reps, log })));
    if (wanted('sagas')) {
      scenarios.push(await runSagas({ adminUrl, quick, reps, log }));
    }
    if (wanted('churn')) {
      const s: ScenarioResult = {
        id: 'churn',
        title: `Churn: ${plan.churnJobs.toLocaleString('en-US')} jobs through the queue with retention on`,
        metric: 'MiB at the end (tables + indexes)',
        higherIsBetter: false,
        columns: {
          tableMiB: 'table MiB',
          indexMiB: 'index MiB',
          deadTuples: 'dead tuples',
          liveTuples: 'live tuples',
          jobsPerSecond: 'jobs/s',
        },
        rows: [],
        notes: [
          'One process enqueues in chunks of 1,000 while one worker process (concurrency 10) drains. Retention: skiplock deletes completed jobs older than 1 s every second (its default keeps them 7 days); pg-boss archives completed jobs after 1 s with maintenance every second; Graphile Worker deletes each job when it completes.',
          'A size, not a speed: one repetition.',
        ],
      };
      scenarios.push(s);
      await interleaved(
        s,
        'concurrency 10',
        CHURN_SYSTEMS,
        (system) =>
          churnRun(ctx, system, { jobs: plan.churnJobs, timeoutMs: quick ? 30_000 : 60_000 }),
        1,
      );
    }
    const curve = { adminUrl, quick, reps, log };
    if (wanted('processes')) scenarios.push(await processCurve(curve));
    if (wanted('saga-inflight')) scenarios.push(await sagaInflightCurve(curve));
    // Building 10 M rows takes minutes: full runs only, as the 2 M-row scenario.
    if (wanted('table-size') && !quick) scenarios.push(await tableSizeCurve(curve));
    commitAfter = await commitLatencyMs(adminUrl);
  } finally {
    await dropTemplates();
    await server.stop();
  }

  const cpus = os.cpus();
  const results: BenchResults = {
    header: {
      startedAt,
      finishedAt: new Date().toISOString(),
      mode: quick ? 'quick' : 'full',
      repetitions: reps,
      machine: {
        cpus: cpus.length,
        cpuModel: cpus[0]?.model ?? 'unknown',
        memoryGiB: os.totalmem() / 1024 ** 3,
        node: process.version,
        platform: `${os.platform()} ${os.release()}`,
      },
      server: {
        source: server.source,
        settings,
        postgresCpu: cpuVisible() ? 'from /proc' : 'n/a (server processes not visible)',
        commitLatencyMs: { before: commitBefore, after: commitAfter },
      },
      load: { before: loadBefore, after: os.loadavg() },
      versions: {
        '@skiplock/queue': packageVersion('@skiplock/queue'),
        'graphile-worker': packageVersion('graphile-worker'),
        'pg-boss': packageVersion('pg-boss'),
        'pg-boss 12 (keys scenario)': packageVersion('pg-boss-12'),
        '@dbos-inc/dbos-sdk': packageVersion('@dbos-inc/dbos-sdk'),
        '@skiplock/outbox': packageVersion('@skiplock/outbox'),
        '@nats-io/jetstream': packageVersion('@nats-io/jetstream'),
        amqplib: packageVersion('amqplib'),
        pg: packageVersion('pg'),
      },
      code: skiplockCode(),
    },
    targets: [],
    scenarios,
  };
  results.targets = evaluateTargets(results);
  mkdirSync(outDir, { recursive: true });
  const markdown = renderMarkdown(results);
  writeFileSync(`${outDir}/latest.md`, markdown);
  writeFileSync(`${outDir}/latest.json`, `${JSON.stringify(results, null, 2)}\n`);
  // A chart that cannot be drawn fails the run (CI runs this), after the tables are written.
  const charts = await renderCharts(scenarios, outDir).catch((error: unknown) => {
    log(`charts failed: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
    return [] as string[];
  });
  process.stdout.write(`${markdown}\n`);
  log(`wrote ${outDir}/latest.md, latest.json${charts.map((f) => `, ${f}`).join('')}`);
  // A broken relay run, or a broken ceiling beside it, breaks the benchmark as skiplock's do.
  const mustRun = new Set(['skiplock', RELAY, DIRECT]);
  const failed = scenarios.flatMap((s) =>
    s.rows.filter((r) => mustRun.has(r.system) && r.runs.some((m) => m.value === null)),
  );
  if (failed.length > 0) {
    log(`skiplock failed in ${failed.length} configuration(s); see the notes`);
    process.exitCode = 1;
  }
}

await main().catch((error: unknown) => {
  process.stderr.write(
    `benchmark failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
// Some peers keep timers alive after their pools end; the results are written, so leave now.
process.exit(process.exitCode ?? 0);
