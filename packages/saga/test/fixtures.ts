import { createWorker, type Worker } from '@skiplock/queue';
import type pg from 'pg';
import { pino } from 'pino';
import { afterEach } from 'vitest';
import {
  createSagaRuntime,
  type AnySagaDefinition,
  type SagaRuntime,
  type SagaView,
} from '../src/index.js';
import type { SagaRuntimeOptions } from '../src/runtime.js';
import { waitFor } from '../../../test/support/wait.js';

export const silent = pino({ level: 'silent' });
export const fast = { backoff: { baseMs: 10, maxMs: 50 } } as const;

const running: { worker: Worker; runtime: SagaRuntime }[] = [];

afterEach(async () => {
  await Promise.all(
    running.splice(0).map(async ({ worker, runtime }) => {
      await worker.stop({ timeoutMs: 1_000 });
      await runtime.close();
    }),
  );
});

/** A runtime and a started worker for it; both are stopped after the test. */
export async function startSagas(
  pool: pg.Pool,
  sagas: readonly AnySagaDefinition[],
  options: Partial<SagaRuntimeOptions> = {},
): Promise<{ runtime: SagaRuntime; worker: Worker }> {
  const runtime = createSagaRuntime({ pool, sagas, logger: silent, ...options });
  const worker = createWorker({
    pool,
    jobs: runtime.jobs,
    logger: options.logger ?? silent,
    concurrency: 4,
    pollIntervalMs: 20,
    sweeper: false,
    retention: false,
    // A job of a version this worker lacks goes dead at its 10th claim here in well under a
    // second, not in 4-8.5 min at the default backoff.
    unknownTypeBackoff: { baseMs: 10, maxMs: 50 },
  });
  await worker.start();
  running.push({ worker, runtime });
  return { runtime, worker };
}

const TERMINAL = new Set(['completed', 'compensated', 'cancelled', 'failed']);

/** Waits until the saga reaches one of `statuses` (default: any terminal status). */
export async function settled(
  runtime: SagaRuntime,
  id: string,
  statuses: readonly string[] = [...TERMINAL],
): Promise<SagaView> {
  return waitFor(
    async () => {
      const saga = await runtime.getSaga(id);
      return saga && statuses.includes(saga.status) ? saga : null;
    },
    { what: `saga ${id} to be ${statuses.join('|')}` },
  );
}

/** The history as `kind:step:status` strings, in order. */
export function timeline(saga: SagaView): string[] {
  return saga.history.map((h) => `${h.kind === 'step' ? '' : 'undo '}${h.step}:${h.status}`);
}

/** A logger that keeps its lines as objects, for tests of `reason` codes. */
export function captureLogs() {
  const lines: Record<string, unknown>[] = [];
  const logger = pino(
    { level: 'info' },
    { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) },
  );
  return { logger, lines };
}
