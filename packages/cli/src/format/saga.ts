import type { SagaSummary, SagaView, StrandedJob } from '@skiplock/saga';
import { cell } from './table.js';

const iso = (d: Date | null) => (d === null ? null : d.toISOString());

/** A saga for `--json` output, keys in a fixed order. */
export function sagaSummaryJson(s: SagaSummary) {
  return {
    id: s.id,
    name: s.name,
    version: s.version,
    status: s.status,
    currentStep: s.currentStep,
    currentKind: s.currentKind,
    currentJobId: s.currentJobId,
    pivoted: s.pivoted,
    cancelRequested: s.cancelRequested,
    deadline: iso(s.deadline),
    error: s.error,
    createdAt: iso(s.createdAt),
    updatedAt: iso(s.updatedAt),
    finishedAt: iso(s.finishedAt),
    lockKey: s.lockKey,
    parent: s.parent,
  };
}

export function sagaJson(view: SagaView) {
  return {
    saga: { ...sagaSummaryJson(view), input: view.input },
    history: view.history.map((h) => ({
      step: h.step,
      kind: h.kind,
      status: h.status,
      attempts: h.attempts,
      jobId: h.jobId,
      output: h.output,
      error: h.error,
      createdAt: iso(h.createdAt),
      startedAt: iso(h.startedAt),
      finishedAt: iso(h.finishedAt),
    })),
    signals: view.signals.map((s) => ({
      name: s.name,
      payload: s.payload,
      receivedAt: iso(s.receivedAt),
      consumedAt: iso(s.consumedAt),
    })),
    children: view.children,
    stranded: view.stranded,
  };
}

/**
 * What an operator reads of a stranded saga (see `SagaView.stranded`): the job it is on (or, for
 * a waiting saga, the timeout or wake job that was to end its wait), why that job cannot move it,
 * and what does.
 */
export function strandedText(s: StrandedJob): string {
  // A timeout job that no longer exists has no id the saga knows: it is named by its key.
  const job =
    s.kind === 'timeout'
      ? `its wait's timeout job ${s.jobId ?? `(key ${s.key})`}`
      : `job ${s.jobId}`;
  const what =
    s.status === 'missing'
      ? `${job} no longer exists`
      : `${job} is ${s.status}${s.lastError === null ? '' : ` (${cell(s.lastError, 200)})`}`;
  return (
    `stranded: ${what}; a saga runtime's reconciler moves it on ` +
    '(skiplock sagas reconcile --module FILE)'
  );
}
