import { brokerLabels } from './brokers/types.js';
import { accountingMedian, extraMedian, fmt, rowMedian } from './report.js';
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

/**
 * At most `limit` (when given) and below the peer's figure in the same run (or equal, with
 * `orEqual`): latencies, rows and WAL, where lower is better.
 */
function below(
  target: string,
  mine: number | null,
  limit: number | null,
  peer: number | null,
  what: string,
  unit: string,
  orEqual = false,
): TargetResult {
  const underPeer = mine !== null && peer !== null ? (orEqual ? mine <= peer : mine < peer) : null;
  const underLimit = limit === null || mine === null ? true : mine <= limit;
  return {
    target,
    skiplock: `${fmt(mine)} ${unit}`,
    reference: `${what} ${fmt(peer)} ${unit}${limit === null ? '' : `; limit ${limit} ${unit}`}`,
    met: underPeer === null ? null : underPeer && underLimit,
  };
}

/** Issues 13, 15 and 16's targets, judged on the medians of this run (overshoot: on every run). */
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
    const single = 'single, sequential';
    const m = (system: string) => {
      const r = row(enqueue, system, single);
      return r ? rowMedian(r) : null;
    };
    out.push(
      atLeast(
        'single enqueue ≥ 0.95× bare SQL',
        m('skiplock'),
        m('bare'),
        0.95,
        'bare SQL',
        'jobs/s',
      ),
    );
  }
  const latency = by('latency');
  if (latency) {
    const mine = row(latency, 'skiplock', '50 jobs/s');
    const peer = row(latency, 'graphile', '50 jobs/s');
    for (const q of ['p50Ms', 'p99Ms'] as const) {
      out.push(
        below(
          `enqueue-to-start ${q.slice(0, 3)} below graphile-worker's`,
          mine ? extraMedian(mine, q) : null,
          null,
          peer ? extraMedian(peer, q) : null,
          'graphile-worker',
          'ms',
        ),
      );
    }
  }
  // Claims are judged by the probe's claim of the seed's 100 jobs (see CLAIM_PROBE_NOTE): a
  // drain's own claim timings are not the claim's cost.
  const big = by('big-table');
  if (big) {
    const r = row(big, 'skiplock', '1 process × 10');
    const bare = row(big, 'bare', '1 process × 10');
    const result = atMost(
      'claim p95 ≤ 2 ms on the 2 M-row table (a claim of 100)',
      r ? extraMedian(r, 'probe100P95Ms') : null,
      2,
      'ms',
    );
    const of500 = r ? extraMedian(r, 'probe500P95Ms') : null;
    const bare100 = bare ? extraMedian(bare, 'probe100P95Ms') : null;
    result.reference += `; bare SQL's ${fmt(bare100)} ms; a claim of 500: ${fmt(of500)} ms`;
    out.push(result);
  }
  const sizes = by('table-size');
  if (sizes) {
    const p95 = (config: string) => {
      const r = row(sizes, 'skiplock', config);
      return r ? extraMedian(r, 'probe100P95Ms') : null;
    };
    const [at2m, at10m] = [p95('2 M rows'), p95('10 M rows')];
    out.push({
      target: 'claim p95 at 10 M rows within 1.5× of the 2 M-row figure (a claim of 100)',
      skiplock: `${fmt(at10m)} ms`,
      reference: `2 M rows ${fmt(at2m)} ms (limit ${fmt(at2m === null ? null : 1.5 * at2m)} ms; now ${
        at10m !== null && at2m ? fmt(at10m / at2m, 2) : 'n/a'
      }×)`,
      met: at10m === null || at2m === null ? null : at10m <= 1.5 * at2m,
    });
  }
  const sagas = by('sagas');
  if (sagas) {
    const mine = row(sagas, 'skiplock-saga', 'throughput');
    const dbos = row(sagas, 'dbos', 'throughput');
    out.push(
      atLeast(
        '3-step sagas/s, 50 in flight ≥ 2× DBOS',
        mine ? rowMedian(mine) : null,
        dbos ? rowMedian(dbos) : null,
        2,
        'DBOS',
        'sagas/s',
      ),
    );
    const paced = row(sagas, 'skiplock-saga', '20 sagas/s');
    const dbosPaced = row(sagas, 'dbos', '20 sagas/s');
    for (const [q, limit] of [
      ['p50Ms', 10],
      ['p99Ms', 25],
    ] as const) {
      out.push(
        below(
          `saga start-to-finish ${q.slice(0, 3)} ≤ ${limit} ms at 20 sagas/s, and below DBOS`,
          paced ? extraMedian(paced, q) : null,
          limit,
          dbosPaced ? extraMedian(dbosPaced, q) : null,
          'DBOS',
          'ms',
        ),
      );
    }
    out.push(
      below(
        "rows written per saga ≤ DBOS's",
        mine ? extraMedian(mine, 'rowsPerSaga') : null,
        null,
        dbos ? extraMedian(dbos, 'rowsPerSaga') : null,
        'DBOS',
        'rows',
        true,
      ),
    );
    out.push(
      below(
        "WAL bytes per saga ≤ DBOS's",
        mine ? accountingMedian(mine, 'walBytesPerJob') : null,
        null,
        dbos ? accountingMedian(dbos, 'walBytesPerJob') : null,
        'DBOS',
        'B',
        true,
      ),
    );
  }
  // Issue 16: the concurrency-key drain.
  const keys = by('keys');
  if (keys) {
    const config = '2 processes × 10';
    const keyed = row(keys, 'skiplock-keyed', config);
    const unlimited = row(keys, 'skiplock', config);
    out.push(
      atLeast(
        'keys drain, 1,000 keys of limit 1 ≥ 0.5× the unlimited drain',
        keyed ? rowMedian(keyed) : null,
        unlimited ? rowMedian(unlimited) : null,
        0.5,
        'skiplock unlimited',
        'jobs/s',
      ),
    );
    // Overshoot is judged on every repetition, not the median: one is enough to miss.
    const most = keyed
      ? Math.max(...keyed.runs.map((m) => m.extra['mostPerKey'] ?? Number.NaN))
      : null;
    out.push(
      atMost(
        'keys drain: never more than 1 job of a key running at once',
        most === null || Number.isNaN(most) ? null : most,
        1,
        'at once',
      ),
    );
  }
  // Issue 15: the outbox relay against the same client publishing with no database in between.
  const relay = by('relay');
  if (relay) {
    for (const label of Object.values(brokerLabels)) {
      const mine = row(relay, 'skiplock-relay', label);
      const ceiling = row(relay, 'broker-direct', label);
      out.push(
        atLeast(
          `outbox relay to ${label} ≥ 0.7× its client alone (no database)`,
          mine ? rowMedian(mine) : null,
          ceiling ? rowMedian(ceiling) : null,
          0.7,
          `${label} client alone`,
          'events/s',
        ),
      );
    }
  }
  return out;
}
