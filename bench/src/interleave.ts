import type { Measurement } from './measurement.js';
import type { ScenarioResult } from './results.js';
import { labelOf } from './systems/labels.js';

export interface InterleaveOptions {
  repetitions: number;
  log: (line: string) => void;
}

/**
 * Runs `measure` for every system, repetition by repetition (A B A B), so drift in the machine's
 * load touches every system alike; a failed run is kept as a row with its reason, not dropped.
 */
export async function interleaved(
  scenario: ScenarioResult,
  config: string,
  systems: readonly string[],
  measure: (system: string) => Promise<Measurement>,
  { repetitions, log }: InterleaveOptions,
): Promise<void> {
  const rows = systems.map((system) => {
    const row = { system, label: labelOf(system), config, runs: [] as Measurement[] };
    scenario.rows.push(row);
    return row;
  });
  for (let rep = 1; rep <= repetitions; rep++) {
    for (const row of rows) {
      log(`${scenario.id} · ${config} · ${row.system} · repetition ${rep}/${repetitions}`);
      try {
        const m = await measure(row.system);
        row.runs.push(m);
        log(`  → ${m.value?.toFixed(2)} ${scenario.metric}${m.note ? ` (${m.note})` : ''}`);
      } catch (error) {
        const message = error instanceof Error ? error.message.split('\n')[0]! : String(error);
        log(`  → failed: ${message}`);
        row.runs.push({ value: null, extra: {}, accounting: null, note: `failed: ${message}` });
      }
    }
  }
}
