import { NonRetryableError } from '@skiplock/queue';
import type { Queryable } from '@skiplock/queue/engine';
import { branchIdOf } from './branch.js';
import type { StepSpec } from './define.js';
import { entryKey, type Engine, type SagaEntry } from './engine.js';
import { keyHeldByOther } from './lock.js';
import type { SagaStatus, SagaStepKind } from './schema.js';
import {
  clearCurrentJob,
  enterRow,
  insertSaga,
  lockSaga,
  reopenForCompensation,
  reopenSaga,
  selectBranches,
  setSagaFlags,
  type BranchRow,
  type SagaRow,
} from './sql/sagas.js';
import { selectHistory, settleStep, type AttemptMark, type HistoryRow } from './sql/steps.js';
import {
  advanceAfter,
  compensateNext,
  enterStep,
  failSaga,
  inherited,
  isCurrent,
  park,
  type Transition,
} from './transitions.js';

/**
 * Parallel groups (`.parallel()`): each branch is a one-step child saga (see `branch.ts`), started
 * together in the group step's transaction. Every branch's end locks the parent (after its own
 * row, as a child's end does) and calls `joinBranches`, so the branches' ends serialize on the
 * parent and the last one sees all the others: that one moves the parent, in its own ending
 * transaction. Compensation order, stated in `SagaDefinition.parallel`: a failed group lets its
 * other branches finish; then its completed branches compensate all at once; when the last is
 * undone, the steps before the group compensate in reverse.
 */

/** A saga (a branch, a child) in one of these has not ended: its end is still to come. */
export const ACTIVE: ReadonlySet<SagaStatus> = new Set([
  'queued',
  'running',
  'waiting',
  'compensating',
]);

const branchOf = (spec: StepSpec, parentId: string, row: BranchRow) =>
  spec.parallel!.branches.find((b) => branchIdOf(parentId, spec.name, b.name) === row.id);

/** A completed branch with something to undo (a branch without `compensate` has nothing). */
const needsUndo = (spec: StepSpec, parentId: string, row: BranchRow) =>
  row.status === 'completed' &&
  branchOf(spec, parentId, row)?.def.steps[0]?.role === 'compensatable';

/**
 * Starts every branch of the group at step `index` with `inputJson` (see `BranchInput`), then
 * parks the saga on the step, in one transaction. Branches' first jobs are handed to this
 * worker as far as it has room (the slot the group's job frees and its free ones: `HandOffSlot
 * .room`), to start at once with no claim in between; the rest are enqueued for any worker, so a
 * busy worker never holds branches that idle ones could run. A branch id already taken, or a
 * branch's first job key held by another job, rolls it all back and fails the step for good.
 */
export async function enterParallel(
  e: Engine,
  tx: Queryable,
  entry: SagaEntry,
  saga: SagaRow,
  index: number,
  inputJson: string,
  attempt?: AttemptMark,
): Promise<Transition> {
  const spec = entry.steps[index]!;
  const { left: deadlineMs, trace } = inherited(saga);
  for (const branch of spec.parallel!.branches) {
    const id = branchIdOf(saga.id, spec.name, branch.name);
    const { def } = branch;
    const inserted = await e.sql(
      tx,
      insertSaga({
        id,
        name: def.name,
        version: def.version,
        inputJson,
        deadlineMs,
        trace,
        parent: { id: saga.id, step: spec.name },
      }),
    );
    if (inserted.rowCount === 0) {
      throw new NonRetryableError(
        `parallel step "${spec.name}": branch saga id "${id}" is already taken by another saga`,
      );
    }
    const branchEntry = e.entries.get(entryKey(def.name, def.version))!;
    if ((await enterStep(e, tx, branchEntry, id, 0)) !== 'advanced') {
      throw new NonRetryableError(
        `parallel step "${spec.name}": the first job key of branch saga "${id}" (saga:${id}:${branch.name}) is held by a job that is not the branch's`,
      );
    }
  }
  await park(e, tx, entry, saga, index, null, attempt);
  e.logger.info(
    { reason: 'branches_started', sagaId: saga.id, saga: saga.name, step: spec.name },
    'parallel branches started',
  );
  return 'waiting';
}

/**
 * A branch of the parallel step `spec` ended; the parent is locked. Until the last branch ends
 * nothing moves. Then: all completed, the step completes with their outputs by branch name; any
 * not, the step fails (cancelled, when the saga was) and the completed branches are undone
 * (`undoBranches`). While the group compensates, the last branch undone completes that
 * compensation and the steps before go on; a branch that could not be undone (`failed`) fails the
 * saga for an operator, whose retry of that branch resumes the undoing here.
 */
export async function joinBranches(
  e: Engine,
  tx: Queryable,
  entry: SagaEntry,
  parent: SagaRow,
  spec: StepSpec,
): Promise<Transition> {
  const branches = (await e.sql<BranchRow>(tx, selectBranches(parent.id, spec.name))).rows;
  const running = branches.some((b) => ACTIVE.has(b.status));
  // A closure, so that the first check does not narrow `parent` for the next.
  const at = (kind: SagaStepKind, status: SagaStatus) =>
    isCurrent(parent, spec.name, kind, [status]);
  if (at('step', 'waiting')) {
    if (running) return 'waiting';
    const ended = branches.filter((b) => b.status !== 'completed');
    if (ended.length === 0) {
      const prefix = `${parent.id}/${spec.name}/`;
      const outputs = Object.fromEntries(
        branches.map((b) => [b.id.slice(prefix.length), b.output]),
      );
      return advanceAfter(e, tx, entry, parent, spec.index, outputs);
    }
    // Every branch that did not complete, each with its end (the first one's error in full).
    const [first, ...others] = ended;
    const more = others.map((b) => `; branch saga "${b.id}" ended ${b.status}`).join('');
    const error = `branch saga "${first!.id}" ended ${first!.status}${first!.error ? `: ${first!.error}` : ''}${more}`;
    const status = parent.cancel_requested ? 'cancelled' : 'failed';
    const key = { sagaId: parent.id, step: spec.name, kind: 'step' as const };
    await e.sql(tx, settleStep({ ...key, status, error }));
    const why = parent.cancel_requested ? 'cancelled' : `step "${spec.name}" failed: ${error}`;
    await e.sql(tx, setSagaFlags(parent.id, { error: why }));
    return undoBranches(e, tx, entry, { ...parent, error: why }, spec, 'step');
  }
  const key = { sagaId: parent.id, step: spec.name, kind: 'compensation' as const };
  if (at('compensation', 'compensating')) {
    if (running || branches.some((b) => needsUndo(spec, parent.id, b))) return 'compensating';
    const failed = branches.find((b) => b.status === 'failed');
    if (failed) return failUndo(e, tx, parent, spec, failed);
    await e.sql(tx, settleStep({ ...key, status: 'completed' }));
    return compensateNext(e, tx, entry, parent, spec.index);
  }
  if (parent.status === 'failed' && !running && !branches.some((b) => b.status === 'failed')) {
    // The saga failed on a branch that could not be undone; an operator's retry of that branch
    // has undone it since: the group's compensation goes on, unless another saga took the key
    // the failed one let go of (the saga stays failed; `retryFailed` goes on once it is free).
    if (await keyHeldByOther(tx, parent)) return keyTaken(e, parent, spec);
    const { rows } = await e.sql<HistoryRow>(tx, selectHistory(parent.id));
    const failed = rows.find(
      (r) => r.kind === 'compensation' && r.step === spec.name && r.status === 'failed',
    );
    if (!failed) return 'stale';
    const reopen = { ...key, id: parent.id, status: 'compensating' as const, jobId: failed.job_id };
    await e.sql(tx, reopenSaga(reopen));
    const reopened = { ...parent, status: 'compensating' as const, current_job_id: null };
    return undoBranches(e, tx, entry, reopened, spec, 'compensation');
  }
  return 'stale';
}

/**
 * Undoes the group at `spec`: every completed branch with a compensation is reopened
 * `compensating` and starts its compensation, all in this transaction, so they run at once; the
 * last one's end moves the saga on (`joinBranches`). With nothing to undo the steps before the
 * group compensate now. `from`: the group's step just failed (the saga enters the group's
 * compensation here), or its compensation job runs (the saga is there already).
 */
export async function undoBranches(
  e: Engine,
  tx: Queryable,
  entry: SagaEntry,
  parent: SagaRow,
  spec: StepSpec,
  from: 'step' | 'compensation',
): Promise<Transition> {
  const branches = (await e.sql<BranchRow>(tx, selectBranches(parent.id, spec.name))).rows;
  const undo = branches.filter((b) => needsUndo(spec, parent.id, b));
  const failed = branches.find((b) => b.status === 'failed');
  const key = { sagaId: parent.id, step: spec.name, kind: 'compensation' as const };
  if (undo.length === 0 && !failed) {
    if (from === 'compensation') await e.sql(tx, settleStep({ ...key, status: 'completed' }));
    return compensateNext(e, tx, entry, parent, spec.index);
  }
  // First: a branch's end may move the saga on within this very transaction. Undoing from a
  // compensation job, its row keeps the job (the pointer lets go of it); the last undone branch
  // settles it.
  if (from === 'step') {
    await e.sql(tx, enterRow({ ...key, id: parent.id, status: 'compensating', jobId: null }));
  } else {
    await e.sql(tx, settleStep({ ...key, status: 'pending' }));
    await e.sql(tx, clearCurrentJob(parent.id));
  }
  // Every completed branch is undone, even beside one that is failed (say, a cancelled branch
  // whose own undo failed): the last of them to end fails the saga then (`joinBranches`), so an
  // operator's retry finds only the failed one left to mend.
  const reason = `parent saga "${parent.id}" compensates: ${parent.error ?? 'compensating'}`;
  let reopened = 0;
  for (const row of undo) {
    const branch = branchOf(spec, parent.id, row)!;
    const child = (await e.sql<SagaRow>(tx, lockSaga(row.id))).rows[0];
    if (child?.status !== 'completed') continue;
    await e.sql(tx, reopenForCompensation(row.id, reason.slice(0, 2_000)));
    const branchEntry = e.entries.get(entryKey(branch.def.name, branch.def.version))!;
    const open = { ...child, status: 'compensating' as const, cancel_requested: false };
    await compensateNext(e, tx, branchEntry, open, branchEntry.steps.length);
    reopened += 1;
  }
  if (reopened > 0) return 'compensating';
  if (failed) return failUndo(e, tx, parent, spec, failed);
  await e.sql(tx, settleStep({ ...key, status: 'completed' }));
  return compensateNext(e, tx, entry, parent, spec.index);
}

/** Says why a failed saga whose undone branch (or child) would move it on stays failed. */
export function keyTaken(e: Engine, parent: SagaRow, spec: StepSpec): 'stale' {
  e.logger.warn(
    { reason: 'lock_busy', sagaId: parent.id, saga: parent.name, step: spec.name },
    'failed saga stays failed: another saga holds its lock key; retryFailed goes on once it is free',
  );
  return 'stale';
}

/** A branch of the group could not be undone: the group's compensation fails, and the saga. */
async function failUndo(
  e: Engine,
  tx: Queryable,
  parent: SagaRow,
  spec: StepSpec,
  failed: BranchRow,
): Promise<Transition> {
  const why = `branch saga "${failed.id}" is failed and cannot be undone${failed.error ? `: ${failed.error}` : ''}`;
  const key = { sagaId: parent.id, step: spec.name, kind: 'compensation' as const };
  await e.sql(tx, settleStep({ ...key, status: 'failed', error: why }));
  return failSaga(e, tx, parent.id, `compensation of "${spec.name}" failed: ${why}`);
}
