import type { Measurement } from './measurement.js';
import type { BenchResults, ScenarioResult, ScenarioRow } from './results.js';
import { median } from './stats.js';

export function fmt(value: number | null | undefined, digits?: number): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return 'n/a';
  const d = digits ?? (Math.abs(value) >= 100 ? 0 : Math.abs(value) >= 10 ? 1 : 2);
  return value.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });
}

const values = (runs: readonly Measurement[], pick: (m: Measurement) => number | null) =>
  runs.map(pick).filter((v): v is number => v !== null && Number.isFinite(v));

export function rowMedian(row: ScenarioRow): number | null {
  return median(values(row.runs, (m) => m.value));
}

export function extraMedian(row: ScenarioRow, key: string): number | null {
  return median(values(row.runs, (m) => m.extra[key] ?? null));
}

export function accountingMedian(
  row: ScenarioRow,
  key: keyof NonNullable<Measurement['accounting']>,
) {
  return median(
    values(row.runs, (m) => {
      const v = m.accounting?.[key];
      return typeof v === 'number' ? v : null;
    }),
  );
}

function spread(row: ScenarioRow): string {
  const v = values(row.runs, (m) => m.value);
  if (v.length < 2) return '';
  return `${fmt(Math.min(...v))}–${fmt(Math.max(...v))}`;
}

/** skiplock's median against this row's, as "how many times better skiplock is". */
export function ratio(scenario: ScenarioResult, row: ScenarioRow): number | null {
  const mine = scenario.rows.find(
    (r) => r.system.startsWith('skiplock') && r.config === row.config,
  );
  if (!mine || mine === row) return null;
  const a = rowMedian(mine);
  const b = rowMedian(row);
  if (a === null || b === null || a === 0 || b === 0) return null;
  return scenario.higherIsBetter ? a / b : b / a;
}

function scenarioTable(scenario: ScenarioResult): string {
  const extraKeys = Object.keys(scenario.columns);
  const head = [
    'system',
    'config',
    `${scenario.metric} (median)`,
    'min–max',
    'skiplock ×',
    ...extraKeys.map((k) => scenario.columns[k]!),
    'round trips/job',
    'xacts/job',
    'WAL B/job',
    'node CPU ms/job',
    'pg CPU ms/job',
    'note',
  ];
  const lines = [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`];
  for (const row of scenario.rows) {
    if (row.unavailable) {
      lines.push(
        `| ${row.label} | ${row.config} | not run | | | ${extraKeys.map(() => '').join(' | ')}${extraKeys.length ? ' | ' : ''}| | | | | ${row.unavailable} |`,
      );
      continue;
    }
    const r = ratio(scenario, row);
    const notes = [...new Set(row.runs.map((m) => m.note).filter(Boolean))].join('; ');
    lines.push(
      `| ${[
        row.label,
        row.config,
        fmt(rowMedian(row)),
        spread(row),
        r === null ? '' : `${fmt(r, 2)}×`,
        ...extraKeys.map((k) => fmt(extraMedian(row, k))),
        fmt(accountingMedian(row, 'roundTripsPerJob'), 3),
        fmt(accountingMedian(row, 'transactionsPerJob'), 3),
        fmt(accountingMedian(row, 'walBytesPerJob'), 0),
        fmt(accountingMedian(row, 'nodeCpuMsPerJob'), 3),
        fmt(accountingMedian(row, 'pgCpuMsPerJob'), 3),
        notes,
      ].join(' | ')} |`,
    );
  }
  return lines.join('\n');
}

export function renderMarkdown(results: BenchResults): string {
  const h = results.header;
  const out: string[] = [];
  out.push(`# skiplock benchmark (${h.mode})`, '');
  out.push(
    `- run: ${h.startedAt} → ${h.finishedAt}, ${h.repetitions} repetition(s) per figure, systems interleaved (A B A B), medians with min–max`,
    `- machine: ${h.machine.cpus} cores (${h.machine.cpuModel}), ${fmt(h.machine.memoryGiB, 1)} GiB, Node ${h.machine.node}, ${h.machine.platform}`,
    `- PostgreSQL ${h.server.settings.version} (${h.server.source}): shared_buffers ${h.server.settings.shared_buffers}, synchronous_commit ${h.server.settings.synchronous_commit}, fsync ${h.server.settings.fsync}, wal_level ${h.server.settings.wal_level}, max_connections ${h.server.settings.max_connections}; PostgreSQL CPU: ${h.server.postgresCpu}`,
    `- one-row autocommit INSERT on this server (the WAL flush every durable write waits for): ${fmt(h.server.commitLatencyMs.before, 2)} ms before the run, ${fmt(h.server.commitLatencyMs.after, 2)} ms after (median of 50)`,
    `- load average (1/5/15 min): ${h.load.before.map((v) => fmt(v, 2)).join(' / ')} at the start, ${h.load.after.map((v) => fmt(v, 2)).join(' / ')} at the end (anything above the core count means other work shared the machine)`,
    `- versions: ${Object.entries(h.versions)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
    ...(h.code ? [`- skiplock's code: ${h.code}`] : []),
    `- "skiplock ×": skiplock's median divided by the row's (for latency and sizes, the row's divided by skiplock's), so above 1 means skiplock is ahead`,
    `- accounting per job: round trips = statements sent by the benchmark processes (counted in \`pg.Client.prototype.query\`); xacts = committed + rolled back transactions of the database (pg_stat_database); WAL = \`pg_current_wal_lsn()\` difference (server-wide); node CPU = \`process.cpuUsage()\` of the benchmark processes; pg CPU = /proc CPU time of the database's backends and the server's background processes`,
    '',
  );
  if (results.targets.length > 0) {
    out.push('## Targets', '', '| target | skiplock | reference | met |', '|---|---|---|---|');
    for (const t of results.targets) {
      out.push(
        `| ${t.target} | ${t.skiplock} | ${t.reference} | ${t.met === null ? 'n/a' : t.met ? 'met' : 'missed'} |`,
      );
    }
    out.push('');
  }
  for (const s of results.scenarios) {
    out.push(`## ${s.title}`, '', scenarioTable(s), '');
    for (const c of s.charts ?? []) out.push(`![${c.title}](${c.file})`, '');
    for (const n of s.notes) out.push(`- ${n}`);
    if (s.notes.length) out.push('');
  }
  return out.join('\n');
}
