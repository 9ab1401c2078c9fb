import type { Measurement } from './measurement.js';
import type { ServerSettings } from './server.js';

export interface ScenarioRow {
  system: string;
  label: string;
  config: string;
  runs: Measurement[];
  /** Set when the system could not run this scenario at all, with the reason. */
  unavailable?: string;
}

export interface ScenarioResult {
  id: string;
  title: string;
  /** What the main figure is, with its unit. */
  metric: string;
  higherIsBetter: boolean;
  /** Extra figures shown as columns: key in `Measurement.extra` → column title. */
  columns: Record<string, string>;
  rows: ScenarioRow[];
  notes: string[];
  /** Charts drawn from the rows (PNG files next to latest.md), with the configs as the x axis. */
  charts?: ChartSpec[];
}

export interface ChartSpec {
  /** File name in the results directory, e.g. `curve-processes.png`. */
  file: string;
  title: string;
  /** What the configs on the x axis are, e.g. "worker processes (× concurrency 10)". */
  xTitle: string;
  /**
   * One panel per figure: `value` (the scenario's metric) or a key of `Measurement.extra`;
   * `omit` leaves configs out of that panel (a point not comparable with the others).
   */
  panels: { key: string; title: string; omit?: string[] }[];
  /** Where each config sits on a numeric x axis (drawn to scale, log when `xLog`). */
  xValues: Record<string, number>;
  xLog?: boolean;
}

export interface TargetResult {
  target: string;
  skiplock: string;
  reference: string;
  met: boolean | null;
}

export interface BenchHeader {
  startedAt: string;
  finishedAt: string;
  mode: 'full' | 'quick';
  repetitions: number;
  machine: { cpus: number; cpuModel: string; memoryGiB: number; node: string; platform: string };
  server: {
    source: string;
    settings: ServerSettings;
    postgresCpu: string;
    /** Median one-row autocommit INSERT, before and after the run. */
    commitLatencyMs: { before: number; after: number | null };
  };
  /** 1/5/15-minute load averages: other work on the machine shows here. */
  load: { before: number[]; after: number[] };
  versions: Record<string, string>;
  /** Which of skiplock's code ran: the built JavaScript a user installs, or the TypeScript sources. */
  code?: string;
}

export interface BenchResults {
  header: BenchHeader;
  targets: TargetResult[];
  scenarios: ScenarioResult[];
}
