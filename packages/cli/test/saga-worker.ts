import { createWorker } from '@skiplock/queue';
import { createSagaRuntime, type AnySagaDefinition } from '@skiplock/saga';
import type pg from 'pg';
import { pino } from 'pino';
import { afterAll } from 'vitest';

/**
 * A saga runtime and a started worker running its jobs in this process, stopped after the file's
 * tests: real sagas for the CLI to read and act on.
 */
export async function startSagaWorker(pool: pg.Pool, sagas: readonly AnySagaDefinition[]) {
  const silent = pino({ level: 'silent' });
  const runtime = createSagaRuntime({ pool, sagas, logger: silent });
  const worker = createWorker({
    pool,
    jobs: runtime.jobs,
    logger: silent,
    pollIntervalMs: 20,
    sweeper: false,
    retention: false,
  });
  afterAll(async () => {
    await worker.stop({ timeoutMs: 1_000 });
    await runtime.close();
  });
  await worker.start();
  return { runtime, worker };
}
