import { extraMedian, fmt, rowMedian } from './report.js';
import type { BenchResults, ScenarioResult, ScenarioRow, TargetResult } from './results.js';

function row(
  s: ScenarioResult | undefined,
  system: string,
  config: string,
): ScenarioRow | undefined {
  return s?.rows.find((r) => r.system === system && r.config === config && !r.unavailable);
}

function atLeast(
  target: string,
  mine: number | null,
  reference: number | null,
  factor: number,
  what: string,
  unit: string,
): TargetResult {
  const ok = mine !== null && reference !== null ? mine >= factor * reference : null;
  return {
    target,
    skiplock: `${fmt(mine)} ${unit}`,
    reference: `${what} ${fmt(reference)} ${unit} (needs ${fmt(reference === null ? null : factor * reference)}; now ${
      mine !== null && reference ? fmt(mine / reference, 2) : 'n/a'
    }×)`,
    met: ok,
  };
}

function atMost(target: string, mine: number | null, limit: number, unit: string): TargetResult {
  return {
    target,
    skiplock: `${fmt(mine)} ${unit}`,
    reference: `≤ ${limit} ${unit}`,
    met: mine === null ? null : mine <= limit,
  };
}

/** The targets, judged on the medians of this run. */
export function evaluateTargets(results: BenchResults): TargetResult[] {
  const by = (id: string) => results.scenarios.find((s) => s.id === id);
  const out: TargetResult[] = [];
  const drain = by('drain');
  if (drain) {
    const c = '1 process × 10';
    const mine = rowMedian(row(drain, 'skiplock', c) ?? ({ runs: [] } as never));
    const batched = row(drain, 'graphile-lq', c);
    out.push(
      atLeast(
        'drain at concurrency 10, defaults ≥ 1.2× graphile-worker (batched mode)',
        mine,
        batched ? rowMedian(batched) : null,
        1.2,
        batched?.label ?? 'graphile-worker (batched mode)',
        'jobs/s',
      ),
    );
    const bare = row(drain, 'bare', c);
    out.push(
      atLeast(
        'drain at concurrency 10, defaults ≥ 0.9× bare SQL',
        mine,
        bare ? rowMedian(bare) : null,
        0.9,
        'bare SQL',
        'jobs/s',
      ),
    );
    const sync = row(drain, 'skiplock-sync', c);
    out.push(
      atLeast(
        'drain at concurrency 10, asyncCommit: false ≥ 0.8× bare SQL',
        sync ? rowMedian(sync) : null,
        bare ? rowMedian(bare) : null,
        0.8,
        'bare SQL',
        'jobs/s',
      ),
    );
  }
  const enqueue = by('enqueue');
  if (enqueue) {
    const bulk = 'bulk, chunks of 1,000';
    const single = 'single, sequential';
    const m = (system: string, c: string) => {
      const r = row(enqueue, system, c);
      return r ? rowMedian(r) : null;
    };
    out.push(
      atLeast(
        'bulk enqueue ≥ 3× graphile-worker',
        m('skiplock', bulk),
        m('graphile', bulk),
        3,
        'graphile-worker',
        'jobs/s',
      ),
    );
    out.push(
      atLeast(
        'single enqueue ≥ 0.9× bare SQL',
        m('skiplock', single),
        m('bare', single),
        0.9,
        'bare SQL',
        'jobs/s',
      ),
    );
  }
  const latency = by('latency');
  if (latency) {
    const r = row(latency, 'skiplock', '50 jobs/s');
    out.push(atMost('latency p50 ≤ 3 ms', r ? extraMedian(r, 'p50Ms') : null, 3, 'ms'));
    out.push(atMost('latency p99 ≤ 7 ms', r ? extraMedian(r, 'p99Ms') : null, 7, 'ms'));
  }
  const big = by('big-table');
  if (big) {
    const r = row(big, 'skiplock', '1 process × 10');
    const p95 = r ? extraMedian(r, 'claimP95Ms') : null;
    out.push({
      ...atMost('claim p95 < 2 ms on the 2 M-row table', p95, 2, 'ms'),
      met: p95 === null ? null : p95 < 2,
    });
  }
  const sagas = by('sagas');
  if (sagas) {
    const throughput = 'throughput';
    const mine = row(sagas, 'skiplock-saga', throughput);
    const dbos = row(sagas, 'dbos', throughput);
    out.push(
      atLeast(
        'sagas/s ≥ 3× DBOS',
        mine ? rowMedian(mine) : null,
        dbos ? rowMedian(dbos) : null,
        3,
        'DBOS',
        'sagas/s',
      ),
    );
    const paced = row(sagas, 'skiplock-saga', '20 sagas/s');
    out.push(
      atMost(
        'saga start-to-finish p50 ≤ 10 ms',
        paced ? extraMedian(paced, 'p50Ms') : null,
        10,
        'ms',
      ),
    );
  }
  return out;
}
