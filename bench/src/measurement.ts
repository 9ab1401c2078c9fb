import type { ServerDelta } from './server.js';
import type { ChildReport } from './protocol.js';

/** Per-job costs of one run, so a regression shows its cause. */
export interface Accounting {
  jobs: number;
  roundTripsPerJob: number | null;
  transactionsPerJob: number;
  walBytesPerJob: number;
  nodeCpuMsPerJob: number | null;
  pgCpuMsPerJob: number | null;
  /** Statements per job, most frequent first (from the query counter). */
  statements: { statement: string; perJob: number; avgMs: number }[];
}

export interface Measurement {
  value: number | null;
  /** Further figures of the run (percentiles, sizes). */
  extra: Record<string, number | null>;
  accounting: Accounting | null;
  note?: string;
}

export function account(
  jobs: number,
  server: ServerDelta,
  reports: readonly ChildReport[],
  counted = true,
): Accounting {
  const per = (n: number) => (jobs > 0 ? n / jobs : 0);
  const statements = new Map<string, { calls: number; totalMs: number }>();
  for (const r of reports) {
    for (const [key, s] of Object.entries(r.counts.statements)) {
      const e = statements.get(key) ?? { calls: 0, totalMs: 0 };
      e.calls += s.calls;
      e.totalMs += s.totalMs;
      statements.set(key, e);
    }
  }
  const roundTrips = reports.reduce((n, r) => n + r.counts.roundTrips, 0);
  const nodeCpuMs = reports.reduce((n, r) => n + r.cpu.userMs + r.cpu.systemMs, 0);
  return {
    jobs,
    roundTripsPerJob: counted ? per(roundTrips) : null,
    transactionsPerJob: per(server.xacts),
    walBytesPerJob: per(server.walBytes),
    nodeCpuMsPerJob: reports.length > 0 ? per(nodeCpuMs) : null,
    pgCpuMsPerJob: server.cpuSeconds === null ? null : per(server.cpuSeconds * 1000),
    statements: [...statements.entries()]
      .sort((a, b) => b[1].calls - a[1].calls)
      .slice(0, 8)
      .map(([statement, s]) => ({
        statement,
        perJob: per(s.calls),
        avgMs: s.calls > 0 ? s.totalMs / s.calls : 0,
      })),
  };
}
