/**
 * Prints the per-job (per-saga for sagas) cost profile of a results file as one Markdown table:
 * round trips, transactions, WAL bytes, and Node and PostgreSQL CPU, for skiplock and every peer,
 * one representative configuration per scenario. bench/README.md keeps this table for the
 * committed run, so the next regression shows as a diff of two tables.
 *
 *   pnpm --filter @skiplock/bench profile [results/latest.json]
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { accountingMedian, fmt, rowMedian } from './report.js';
import type { BenchResults, ScenarioRow } from './results.js';
import { labelOf } from './systems/labels.js';

/** The configuration each scenario is profiled at; all rows when the list is empty. */
const PROFILED: Record<string, readonly string[]> = {
  drain: ['1 process × 10'],
  enqueue: ['bulk, chunks of 1,000', 'single, sequential'],
  latency: ['50 jobs/s'],
  'big-table': ['1 process × 10'],
  sagas: ['throughput'],
  churn: [],
  processes: ['8 processes'],
  'saga-inflight': ['200 in flight'],
  'table-size': ['10 M rows'],
};

export function profileTable(results: BenchResults): string {
  const lines = [
    '| scenario · config | system | result | round trips | xacts | WAL B | node CPU ms | pg CPU ms |',
    '| --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const s of results.scenarios) {
    const configs = PROFILED[s.id] ?? [];
    for (const r of s.rows) {
      if (r.unavailable || (configs.length > 0 && !configs.includes(r.config))) continue;
      const a = (key: Parameters<typeof accountingMedian>[1], digits: number) =>
        fmt(accountingMedian(r as ScenarioRow, key), digits);
      lines.push(
        `| ${s.id} · ${r.config} | ${labelOf(r.system)} | ${fmt(rowMedian(r))} ${s.metric} | ` +
          `${a('roundTripsPerJob', 3)} | ${a('transactionsPerJob', 3)} | ${a('walBytesPerJob', 0)} | ` +
          `${a('nodeCpuMsPerJob', 3)} | ${a('pgCpuMsPerJob', 3)} |`,
      );
    }
  }
  return lines.join('\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const file = process.argv[2] ?? fileURLToPath(new URL('../results/latest.json', import.meta.url));
  const results = JSON.parse(readFileSync(file, 'utf8')) as BenchResults;
  process.stdout.write(`${profileTable(results)}\n`);
}
