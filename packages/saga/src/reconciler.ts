import { runSql, withTransaction } from '@skiplock/queue';
import { entryKey, type Engine } from './engine.js';
import { lockSaga, type SagaRow } from './sql/sagas.js';
import { selectStranded, tryReconcileLock, type StrandedRow } from './sql/reconcile.js';
import { settleStep } from './sql/steps.js';
import { failSaga, failStep, type Transition } from './transitions.js';

export interface ReconcileResult {
  /** False when another process held the reconciler lock, so this pass did nothing. */
  ran: boolean;
  /** Sagas moved on: to compensation, or to `failed`. */
  reconciled: number;
  sagaIds: string[];
}

export interface ReconcilerOptions {
  /** Pause between passes (default 5,000 ms). */
  intervalMs?: number | undefined;
  /** Most sagas one pass handles (default 100). */
  batchSize?: number | undefined;
}

export interface Reconciler {
  runOnce(): Promise<ReconcileResult>;
  start(): void;
  stop(): Promise<void>;
}

/**
 * Moves on live sagas whose current job died without its dead-letter hook running: when the
 * sweeper kills a job whose last lease expired, or a worker that does not know the saga's version
 * kills it as `unknown_type`. A step is treated as failed for good (compensate, or `failed` past
 * the pivot); a compensation makes the saga `failed`. One pass at a time across all hosts.
 */
export function createReconciler(e: Engine, options: ReconcilerOptions = {}): Reconciler {
  const intervalMs = options.intervalMs ?? 5_000;
  const batchSize = options.batchSize ?? 100;
  if (!Number.isInteger(intervalMs) || intervalMs < 10 || intervalMs > 3_600_000) {
    throw new TypeError('reconciler intervalMs must be an integer from 10 to 3600000');
  }
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000) {
    throw new TypeError('reconciler batchSize must be an integer from 1 to 10000');
  }

  async function reconcileOne(tx: Parameters<typeof failSaga>[0], row: StrandedRow) {
    const saga = (await runSql<SagaRow>(tx, lockSaga(row.id))).rows[0]!;
    const why = row.job_status
      ? `job ${saga.current_job_id} is ${row.job_status}: ${row.last_error ?? 'no error recorded'}`
      : `job ${saga.current_job_id} no longer exists`;
    const entry = e.entries.get(entryKey(saga.name, saga.version));
    const step = saga.current_step!;
    let transition: Transition;
    if (!entry) {
      transition = await failSaga(
        tx,
        saga.id,
        `${why}; no runtime here knows saga "${saga.name}" version ${saga.version}`,
      );
    } else if (saga.current_kind === 'step') {
      const index = entry.steps.findIndex((s) => s.name === step);
      transition = await failStep(e, tx, entry, saga, index, why);
    } else {
      await runSql(
        tx,
        settleStep({ sagaId: saga.id, step, kind: 'compensation', status: 'failed', error: why }),
      );
      transition = await failSaga(tx, saga.id, `compensation of "${step}" failed: ${why}`);
    }
    e.logger.warn(
      { reason: 'saga_reconciled', sagaId: saga.id, step, outcome: transition },
      'stranded saga moved on',
    );
  }

  async function runOnce(): Promise<ReconcileResult> {
    return withTransaction(e.pool, async (tx) => {
      const { rows } = await runSql<{ locked: boolean }>(tx, tryReconcileLock());
      if (!rows[0]?.locked) return { ran: false, reconciled: 0, sagaIds: [] };
      const stranded = (await runSql<StrandedRow>(tx, selectStranded(batchSize))).rows;
      for (const row of stranded) await reconcileOne(tx, row);
      if (stranded.length > 0) e.metrics.inc('sagas_reconciled_total', stranded.length);
      return { ran: true, reconciled: stranded.length, sagaIds: stranded.map((r) => r.id) };
    });
  }

  const stopper = new AbortController();
  let loop: Promise<void> | null = null;

  async function run() {
    let failures = 0;
    while (!stopper.signal.aborted) {
      try {
        await runOnce();
        failures = 0;
      } catch (error) {
        failures = Math.min(failures + 1, 10);
        e.logger.warn(
          { reason: 'db_error', service: 'saga-reconciler', err: String(error) },
          'reconcile pass failed',
        );
      }
      const pause = intervalMs * (failures === 0 ? 0.8 + Math.random() * 0.4 : 2 ** failures);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(pause, 60_000));
        stopper.signal.addEventListener(
          'abort',
          () => {
            clearTimeout(timer);
            resolve();
          },
          { once: true },
        );
      });
    }
  }

  return {
    runOnce,
    start() {
      loop ??= run();
    },
    async stop() {
      stopper.abort();
      await loop;
    },
  };
}
