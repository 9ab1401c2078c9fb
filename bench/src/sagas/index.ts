import type { SagaSystem } from './types.js';

const loaders: Record<string, () => Promise<SagaSystem>> = {
  dbos: async () => (await import('./dbos.js')).dbos,
  'skiplock-saga': async () => (await import('./skiplock.js')).skiplockSaga,
};

export async function sagaSystem(id: string): Promise<SagaSystem> {
  const load = loaders[id];
  if (!load) throw new Error(`unknown saga system "${id}"`);
  return load();
}
