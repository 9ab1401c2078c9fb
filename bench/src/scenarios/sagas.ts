import type { ScenarioResult } from '../results.js';

export interface SagaRunOptions {
  adminUrl: string;
  quick: boolean;
  reps: number;
  log: (line: string) => void;
}

export async function runSagas(_options: SagaRunOptions): Promise<ScenarioResult> {
  const unavailable = '@skiplock/saga is not available yet';
  return {
    id: 'sagas',
    title: 'Sagas: create invoice → charge (10% declined, compensated) → receipt',
    metric: 'sagas/s',
    higherIsBetter: true,
    columns: {},
    rows: [
      { system: 'skiplock', label: 'skiplock saga', config: 'throughput', runs: [], unavailable },
    ],
    notes: [],
  };
}
