import { NonRetryableError, type AnyJobDefinition } from '@skiplock/queue';
import { enqueueHandedOff, runSql, type Queryable } from '@skiplock/queue/engine';
import type { SQL } from 'drizzle-orm';
import { entryKey, type Engine, type SagaEntry, type SagaSnapshot } from './engine.js';
import { compensationKey, stepKey, timeoutKey } from './keys.js';
import { MAX_SLEEP_MS } from './define.js';
import { nextCompensation } from './plan.js';
import { inSagaTrace } from './tracing.js';
import type { SagaStepKind, SagaStatus } from './schema.js';
import { keyHeldByOther, takeKeyTurn } from './lock.js';
import { joinBranches, keyTaken, undoBranches } from './parallel.js';
import { lockNextQueued } from './sql/locks.js';
import {
  enterRow,
  enterRowParts,
  type EnterRow,
  finishSaga,
  clearCurrentJob,
  insertSaga,
  lockEndedChild,
  lockParentOf,
  lockSaga,
  passPointOfNoReturn,
  reopenForCompensation,
  reopenSaga,
  setSagaFlags,
  setSagaStatus,
  type FinishedRow,
  type SagaRow,
} from './sql/sagas.js';
import {
  selectHistory,
  selectOutputs,
  settleStep,
  type AttemptMark,
  type HistoryRow,
} from './sql/steps.js';

/**
 * Every change of a saga's state, each run inside one transaction that holds the saga's row lock
 * (and, from a job, the job's fenced completion). They return what the saga did, for logs.
 */
export type Transition =
  | 'advanced'
  | 'waiting'
  | 'compensating'
  | 'completed'
  | 'compensated'
  | 'cancelled'
  | 'failed'
  | 'stale';

/** Terminal transitions, reported as saga outcomes. */
export const OUTCOMES: ReadonlySet<Transition> = new Set([
  'completed',
  'compensated',
  'cancelled',
  'failed',
]);

export function isCurrent(
  saga: SagaRow | undefined,
  step: string,
  kind: SagaStepKind,
  statuses: readonly SagaStatus[],
): saga is SagaRow {
  return (
    saga !== undefined &&
    statuses.includes(saga.status) &&
    saga.current_step === step &&
    saga.current_kind === kind
  );
}

function enqueue(
  e: Engine,
  tx: Queryable,
  job: AnyJobDefinition,
  sagaId: string,
  idempotencyKey: string,
  delayMs?: number,
): Promise<string | ForeignJob>;
function enqueue(
  e: Engine,
  tx: Queryable,
  job: AnyJobDefinition,
  sagaId: string,
  idempotencyKey: string,
  delayMs: undefined,
  carry: SagaSnapshot | undefined,
  pointAt: Omit<EnterRow, 'jobId'>,
): Promise<string | ForeignJob | Pointed>;
async function enqueue(
  e: Engine,
  tx: Queryable,
  job: AnyJobDefinition,
  sagaId: string,
  idempotencyKey: string,
  delayMs?: number,
  carry?: SagaSnapshot,
  pointAt?: Omit<EnterRow, 'jobId'>,
): Promise<string | ForeignJob | Pointed> {
  const options = delayMs === undefined ? { idempotencyKey } : { idempotencyKey, delayMs };
  // Handed off, the saga's pointer moves in the insert's own statement (see `enterRowParts`).
  const then = pointAt && ((jobId: SQL) => enterRowParts(pointAt, jobId, true));
  const { id, inserted, followed } = e.handOff
    ? await enqueueHandedOff(e.client, tx, e.handOff, job, { sagaId }, { ...options, carry, then })
    : { ...(await e.client.enqueue(job, { sagaId }, { ...options, tx })), followed: false };
  if (followed) return { pointed: id };
  if (!inserted) {
    // The key was taken, so the queue returned the job that holds it. Ours (the same job type
    // for this saga) is what a repeated move finds; any other is not, and waiting on it would
    // leave the saga stuck: the caller fails the saga instead.
    const existing = await e.client.getJob(id, { tx });
    const owner = (existing?.payload as { sagaId?: unknown } | null | undefined)?.sagaId;
    if (existing?.jobType !== job.type || owner !== sagaId) {
      return { foreign: { id, key: idempotencyKey, type: existing?.jobType ?? null, owner } };
    }
  }
  return id;
}

/** The job was inserted and the saga already points at it (`pointAt` of `enqueue`). */
interface Pointed {
  pointed: string;
}

/** The job an enqueue got back for its key belongs to something else (see `enqueue`). */
interface ForeignJob {
  foreign: { id: string; key: string; type: string | null; owner: unknown };
}

/** Fails the saga whose next job's key is held by a job that is not its own; logged loudly. */
async function failForeign(
  e: Engine,
  tx: Queryable,
  sagaId: string,
  step: string,
  { foreign }: ForeignJob,
): Promise<Transition> {
  const holder = foreign.type === null ? 'a job no longer readable' : `a "${foreign.type}" job`;
  const error = `idempotency key "${foreign.key}" of step "${step}" is held by ${holder} (job ${foreign.id}) that is not this saga's`;
  e.logger.error(
    { reason: 'foreign_job', sagaId, step, jobId: foreign.id, jobType: foreign.type },
    "saga failed: its next job's idempotency key belongs to another job",
  );
  return failSaga(e, tx, sagaId, error);
}

/**
 * Enqueues step `index`'s job and points the saga at it. `carry`: the saga as the step's run will
 * find it, handed to that run when the job is handed off (see `SagaSnapshot`).
 */
export async function enterStep(
  e: Engine,
  tx: Queryable,
  entry: SagaEntry,
  sagaId: string,
  index: number,
  carry?: SagaSnapshot,
): Promise<Transition> {
  const spec = entry.steps[index]!;
  // A saga whose first step is retriable starts past its point of no return (see moveOnAfter),
  // unless its deadline passed while it was queued behind its lock key (found in review).
  if (index === 0 && spec.role === 'retriable') {
    const { rows } = await e.sql(tx, passPointOfNoReturn(sagaId));
    if (carry && rows.length > 0) carry.saga.pivoted = true;
  }
  const key = stepKey(sagaId, spec.name);
  const at = { id: sagaId, status: 'running' as const, step: spec.name, kind: 'step' as const };
  const jobId = await enqueue(e, tx, entry.runJobs[index]!, sagaId, key, undefined, carry, at);
  if (typeof jobId === 'object' && 'foreign' in jobId) {
    return failForeign(e, tx, sagaId, spec.name, jobId);
  }
  const id = typeof jobId === 'string' ? jobId : jobId.pointed;
  if (carry) carry.saga.current_job_id = id;
  if (typeof jobId === 'string') await e.sql(tx, enterRow({ ...at, jobId: id }));
  return 'advanced';
}

/** Records step `index`'s output and moves on: the next step, compensation on cancel, or done. */
export async function advanceAfter(
  e: Engine,
  tx: Queryable,
  entry: SagaEntry,
  saga: SagaRow,
  index: number,
  output: unknown,
  attempt?: AttemptMark,
): Promise<Transition> {
  const spec = entry.steps[index]!;
  await e.sql(
    tx,
    settleStep({
      sagaId: saga.id,
      step: spec.name,
      kind: 'step',
      status: 'completed',
      outputJson: JSON.stringify(output ?? null),
      attempt,
    }),
  );
  return moveOnAfter(e, tx, entry, saga, index);
}

/**
 * Moves on from step `index`, whose completion is already recorded in this transaction: the next
 * step, compensation on cancel, or done.
 */
export async function moveOnAfter(
  e: Engine,
  tx: Queryable,
  entry: SagaEntry,
  saga: SagaRow,
  index: number,
): Promise<Transition> {
  const spec = entry.steps[index]!;
  let pivoted = saga.pivoted;
  if (spec.role === 'pivot') {
    await e.sql(tx, setSagaFlags(saga.id, { pivoted: true }));
    pivoted = true;
  }
  if (saga.cancel_requested) {
    if (!pivoted) {
      await e.sql(tx, setSagaFlags(saga.id, { error: 'cancelled' }));
      return compensateNext(e, tx, entry, saga, index + 1);
    }
    // The pivot finished while the cancel waited for it: too late to undo, the saga goes on.
    await e.sql(tx, setSagaFlags(saga.id, { cancelRequested: false }));
    e.logger.warn({ reason: 'cancel_too_late', sagaId: saga.id }, 'cancel ignored after the pivot');
  }
  if (index + 1 < entry.steps.length) {
    const next = entry.steps[index + 1]!;
    // Without a pivot, the first retriable step is the point of no return (the README's "Step
    // kinds and order"): from there on a failure ends the saga failed, a cancel is refused and the
    // deadline no longer applies, as after a pivot. Before, such a saga compensated (audit). A
    // deadline already passed is left to the step's start, which compensates (from review).
    if (!pivoted && next.role === 'retriable') {
      pivoted = (await e.sql(tx, passPointOfNoReturn(saga.id))).rows.length > 0;
    }
    return enterStep(e, tx, entry, saga.id, index + 1, e.onward?.next(next.name, pivoted));
  }
  await endSaga(e, tx, saga.id, 'completed', null);
  return 'completed';
}

/** Parks the saga on a wait step; a timeout job ends the wait at its timeout or the deadline. */
export function enterWaiting(
  e: Engine,
  tx: Queryable,
  entry: SagaEntry,
  saga: SagaRow,
  index: number,
  attempt?: AttemptMark,
): Promise<Transition> {
  return park(e, tx, entry, saga, index, entry.steps[index]!.wait?.timeoutMs ?? null, attempt);
}

/**
 * Parks the saga on a sleep step for `delayMs`: its wake job (the step's timeout job type) is due
 * then, or at the deadline when that comes first and the saga can still compensate. Nothing else
 * holds the sleep: no worker, no connection, no timer.
 */
export function enterSleep(
  e: Engine,
  tx: Queryable,
  entry: SagaEntry,
  saga: SagaRow,
  index: number,
  delayMs: number,
  attempt?: AttemptMark,
): Promise<Transition> {
  return park(e, tx, entry, saga, index, delayMs, attempt);
}

/**
 * The saga waits on step `index`: its timeout job (a sleep's wake job) is due after `limitMs` or
 * at the deadline, whichever comes first, the deadline only while the saga can still compensate.
 * With neither, no job: only a signal ends the wait.
 */
export async function park(
  e: Engine,
  tx: Queryable,
  entry: SagaEntry,
  saga: SagaRow,
  index: number,
  limitMs: number | null,
  attempt: AttemptMark | undefined,
): Promise<Transition> {
  const spec = entry.steps[index]!;
  await e.sql(
    tx,
    settleStep({ sagaId: saga.id, step: spec.name, kind: 'step', status: 'waiting', attempt }),
  );
  await e.sql(tx, setSagaStatus(saga.id, 'waiting'));
  const limits = [limitMs, saga.pivoted ? null : saga.deadline_left_ms];
  const delays = limits.filter((l): l is number => l !== null);
  const timeoutJob = entry.timeoutJobs[index];
  if (delays.length > 0 && timeoutJob) {
    // Never more than the queue's longest delay (it refuses more): every limit is at most that
    // (checked at definition and start), and the +1 that puts a deadline's job past it would
    // push a ten-year one over.
    const delayMs = Math.min(MAX_SLEEP_MS, Math.max(0, Math.ceil(Math.min(...delays)) + 1));
    const key = timeoutKey(saga.id, spec.name);
    const jobId = await enqueue(e, tx, timeoutJob, saga.id, key, delayMs);
    if (typeof jobId !== 'string') return failForeign(e, tx, saga.id, spec.name, jobId);
  }
  return 'waiting';
}

/**
 * Step `index` failed for good (or was cancelled): record it, then compensate the completed
 * steps before it, or fail the saga when it is past its pivot.
 */
export async function failStep(
  e: Engine,
  tx: Queryable,
  entry: SagaEntry,
  saga: SagaRow,
  index: number,
  error: string,
  status: 'failed' | 'cancelled' = 'failed',
  attempt?: AttemptMark,
): Promise<Transition> {
  const spec = entry.steps[index]!;
  await e.sql(
    tx,
    settleStep({ sagaId: saga.id, step: spec.name, kind: 'step', status, error, attempt }),
  );
  if (saga.pivoted) {
    const past = entry.steps.some((s) => s.role === 'pivot')
      ? 'after the pivot'
      : 'past the first retriable step';
    return failSaga(e, tx, saga.id, `step "${spec.name}" failed ${past}: ${error}`);
  }
  const why = saga.cancel_requested ? 'cancelled' : `step "${spec.name}" failed: ${error}`;
  await e.sql(tx, setSagaFlags(saga.id, { error: why }));
  return compensateNext(e, tx, entry, saga, index);
}

/** Enqueues the compensation of the latest completed step before `beforeIndex`, or ends. */
export async function compensateNext(
  e: Engine,
  tx: Queryable,
  entry: SagaEntry,
  saga: SagaRow,
  beforeIndex: number,
): Promise<Transition> {
  const { rows } = await e.sql<{ step: string }>(tx, selectOutputs(saga.id));
  const next = nextCompensation(entry.steps, new Set(rows.map((r) => r.step)), beforeIndex);
  if (!next) {
    const status = saga.cancel_requested ? 'cancelled' : 'compensated';
    await endSaga(e, tx, saga.id, status, undefined);
    return status;
  }
  const job = entry.compensateJobs[next.index]!;
  const jobId = await enqueue(e, tx, job, saga.id, compensationKey(saga.id, next.name));
  if (typeof jobId !== 'string') return failForeign(e, tx, saga.id, next.name, jobId);
  await e.sql(
    tx,
    enterRow({
      id: saga.id,
      status: 'compensating',
      step: next.name,
      kind: 'compensation',
      jobId,
    }),
  );
  return 'compensating';
}

/** Ends the saga as `failed`: it needs an operator. */
export async function failSaga(
  e: Engine,
  tx: Queryable,
  sagaId: string,
  error: string,
): Promise<Transition> {
  await endSaga(e, tx, sagaId, 'failed', error.slice(0, 2_000));
  return 'failed';
}

/**
 * Every end of a saga: the terminal status, then, in the same transaction, what waits on it: when
 * it held a lock key, the next saga queued for the key starts (`failed` ends count: a saga that
 * needs an operator does not hold its key; a retry takes it back only while it is free); when it
 * is a child saga, its parent's step moves on (`resumeParent`).
 */
export async function endSaga(
  e: Engine,
  tx: Queryable,
  sagaId: string,
  status: 'completed' | 'compensated' | 'cancelled' | 'failed',
  error: string | null | undefined,
): Promise<void> {
  const ended = (await e.sql<FinishedRow>(tx, finishSaga(sagaId, status, error))).rows[0];
  // In the reconciler's pass, not waiting for the key's turn: that pass holds a page of live
  // sagas locked, and waited there behind a producer's open start() of the key, while every
  // completion of those sagas waited behind it (found by an audit). Its next transaction
  // (`reconcileQueues`) starts the key's queue once the turn is free.
  if (ended?.lock_key) {
    await startNextInLine(e, tx, ended.name, ended.lock_key, e.waitForKeyTurn !== false);
  }
  if (ended?.parent_id && ended.parent_step) await resumeParent(e, tx, ended, status);
}

/**
 * What a child saga (or a parallel branch) takes from its parent: what is left of the parent's
 * deadline (at least 1 ms; null without one), and the parent's trace.
 */
export function inherited(saga: SagaRow) {
  const left =
    saga.deadline_left_ms === null ? null : Math.max(1, Math.floor(saga.deadline_left_ms));
  const trace = saga.trace_parent ? { parent: saga.trace_parent, state: saga.trace_state } : null;
  return { left, trace };
}

/** A child saga's id: its parent's id and the parent's step that starts it. */
export const childIdOf = (parentId: string, step: string) => `${parentId}/${step}`;

/**
 * Starts the child saga of step `index` (see `.child()`) with `inputJson`, then parks the parent
 * on that step (`waiting`, no timeout job: the child's deadline is at most the parent's), both in
 * the step's transaction. The child's first job is handed to this worker. A child id already
 * taken fails the step.
 */
export async function enterChild(
  e: Engine,
  tx: Queryable,
  entry: SagaEntry,
  saga: SagaRow,
  index: number,
  inputJson: string,
  attempt?: AttemptMark,
): Promise<Transition> {
  const spec = entry.steps[index]!;
  const child = spec.child!.def;
  const childEntry = e.entries.get(entryKey(child.name, child.version))!;
  const id = childIdOf(saga.id, spec.name);
  const { left, trace } = inherited(saga);
  const deadlineMs =
    left === null ? child.deadlineMs : Math.min(left, child.deadlineMs ?? Number.MAX_SAFE_INTEGER);
  const inserted = await e.sql(
    tx,
    insertSaga({
      id,
      name: child.name,
      version: child.version,
      inputJson,
      deadlineMs,
      trace,
      parent: { id: saga.id, step: spec.name },
    }),
  );
  if (inserted.rowCount === 0) {
    const why = `child saga id "${id}" is already taken by another saga`;
    return failStep(e, tx, entry, saga, index, why, 'failed', attempt);
  }
  if ((await enterStep(e, tx, childEntry, id, 0)) !== 'advanced') {
    // Its first job's key is held by a job not its own: the child failed at once (foreign_job).
    const why = `child saga "${id}" could not start its first step`;
    return failStep(e, tx, entry, saga, index, why, 'failed', attempt);
  }
  await park(e, tx, entry, saga, index, null, attempt);
  e.logger.info(
    { reason: 'child_started', sagaId: id, saga: child.name, parentId: saga.id, step: spec.name },
    'child saga started',
  );
  return 'waiting';
}

/**
 * A child saga ended: in the same transaction, its parent's step moves on. Completed: the step
 * completes with the child's step outputs. Compensated, cancelled or failed: the step fails and
 * the parent compensates (ending `cancelled` when it was cancelled). When the parent was undoing
 * this child (its compensation reopened the child), the compensation completes, or fails with a
 * child that could not be undone (a child still `completed` there, whose end raced the parent's
 * cancel, is left to the compensation's job, which reopens it); a parent that failed so goes on
 * compensating once an operator's retry of the child has undone it. Locks the parent after the child, which its end holds; the
 * paths that lock them the other way round (a parent's compensation reopening its ended children,
 * `resumeEndedChild`) touch only ended children, which no end holds.
 */
export async function resumeParent(
  e: Engine,
  tx: Queryable,
  child: FinishedRow,
  status: 'completed' | 'compensated' | 'cancelled' | 'failed',
): Promise<Transition> {
  const parent = (await e.sql<SagaRow>(tx, lockSaga(child.parent_id!))).rows[0];
  if (!parent) return 'stale';
  const entry = e.entries.get(entryKey(parent.name, parent.version));
  const spec = entry?.steps.find((s) => s.name === child.parent_step && (s.child || s.parallel));
  if (!entry || !spec) {
    e.logger.warn(
      { reason: 'child_parent_unknown', sagaId: child.id, parentId: parent.id },
      "child saga ended; no runtime here knows its parent's version: a reconciler that does moves the parent",
    );
    return 'stale';
  }
  // `e` hands the parent's next job to the worker that ended the child (its slot is free: the
  // child's end enqueued nothing), so the parent goes on without a claim in between.
  const why = `child saga "${child.id}" ended ${status}${child.error ? `: ${child.error}` : ''}`;
  const undone = status === 'compensated' || status === 'cancelled';
  const key = { sagaId: parent.id, step: spec.name, kind: 'compensation' as const };
  // A closure, so that the first check does not narrow `parent` for the next.
  const at = (kind: SagaStepKind, status: SagaStatus) =>
    isCurrent(parent, spec.name, kind, [status]);
  const transition = await inSagaTrace(e.tracer, parent, `child ${spec.name}`, async () => {
    if (spec.parallel) return joinBranches(e, tx, entry, parent, spec);
    if (at('step', 'waiting')) {
      if (status !== 'completed') {
        const how = parent.cancel_requested ? 'cancelled' : 'failed';
        return failStep(e, tx, entry, parent, spec.index, why, how);
      }
      const { rows } = await e.sql<{ step: string; output: unknown }>(tx, selectOutputs(child.id));
      const outputs = Object.fromEntries(rows.map((r) => [r.step, r.output]));
      return advanceAfter(e, tx, entry, parent, spec.index, outputs);
    }
    if (at('compensation', 'compensating')) {
      // A child still completed has not been reopened: its end raced a cancel (or a deadline)
      // and moved this saga into undoing it. The compensation's own job reopens it; its end
      // comes back here. Only a reopened child's end (undone or failed) settles the undo.
      if (status === 'completed') return 'stale' as const;
      await e.sql(
        tx,
        settleStep({ ...key, status: undone ? 'completed' : 'failed', error: undone ? null : why }),
      );
      return undone
        ? compensateNext(e, tx, entry, parent, spec.index)
        : failSaga(e, tx, parent.id, `compensation of "${spec.name}" failed: ${why}`);
    }
    if (parent.status === 'failed' && undone) {
      // The parent failed on this child's compensation; an operator's retry of the child has
      // undone it since: the parent goes on compensating what came before (unless another saga
      // took the key it let go of, as in joinBranches).
      if (await keyHeldByOther(tx, parent)) return keyTaken(e, parent, spec);
      const { rows } = await e.sql<HistoryRow>(tx, selectHistory(parent.id));
      const failed = rows.find(
        (r) => r.kind === 'compensation' && r.step === spec.name && r.status === 'failed',
      );
      if (!failed) return 'stale' as const;
      const reopen = {
        ...key,
        id: parent.id,
        status: 'compensating' as const,
        jobId: failed.job_id,
      };
      await e.sql(tx, reopenSaga(reopen));
      await e.sql(tx, settleStep({ ...key, status: 'completed' }));
      const reopened = { ...parent, status: 'compensating' as const, error: null };
      return compensateNext(e, tx, entry, reopened, spec.index);
    }
    return 'stale' as const;
  });
  if (transition === 'stale') return transition;
  const fields = { sagaId: parent.id, saga: parent.name, step: spec.name };
  e.logger.info(
    { ...fields, reason: 'child_ended', childId: child.id, outcome: transition },
    'child saga ended; its parent moved on',
  );
  if (OUTCOMES.has(transition)) {
    e.metrics.outcomes.inc({ saga: parent.name, step: spec.name, outcome: transition });
    e.logger.warn({ ...fields, reason: `saga_${transition}` }, `saga ${transition}`);
  }
  return transition;
}

/**
 * Moves the parent of a child saga that ended unseen (see `selectStrandedParents`, and a cancel
 * that found the child ended). The parent's row is locked before the child's: the order of a
 * parent's compensation reopening its ended children (`undoBranches`, `compensateChild`), which
 * may run at the same time (a branch's end moving the parent into the group's compensation, say);
 * the other order deadlocked with it. A child that is still active holds its own lock through its
 * end, which locks the parent after it; that end moves the parent itself.
 * Null when it is not an ended child.
 */
export async function resumeEndedChild(
  e: Engine,
  tx: Queryable,
  childId: string,
): Promise<Transition | null> {
  await e.sql(tx, lockParentOf(childId));
  const child = (
    await e.sql<FinishedRow & { status: 'completed' | 'compensated' | 'cancelled' | 'failed' }>(
      tx,
      lockEndedChild(childId),
    )
  ).rows[0];
  return child ? resumeParent(e, tx, child, child.status) : null;
}

/**
 * The parent's compensation of a completed child step: the child compensates its own completed
 * steps in reverse (reopened `compensating`, in this transaction); its end completes this
 * compensation (see `resumeParent`). A child that is already undone completes it at once.
 */
export async function compensateChild(
  e: Engine,
  tx: Queryable,
  entry: SagaEntry,
  parent: SagaRow,
  index: number,
): Promise<Transition> {
  const spec = entry.steps[index]!;
  if (spec.parallel) return undoBranches(e, tx, entry, parent, spec, 'compensation');
  const id = childIdOf(parent.id, spec.name);
  const child = (await e.sql<SagaRow>(tx, lockSaga(id))).rows[0];
  const key = { sagaId: parent.id, step: spec.name, kind: 'compensation' as const };
  if (!child || child.status === 'compensated' || child.status === 'cancelled') {
    // Deleted by hand, or undone already: nothing left to undo.
    await e.sql(tx, settleStep({ ...key, status: 'completed' }));
    return compensateNext(e, tx, entry, parent, index);
  }
  if (child.status !== 'completed') {
    const why = `child saga "${id}" is ${child.status}, not completed, and cannot be undone`;
    await e.sql(tx, settleStep({ ...key, status: 'failed', error: why }));
    return failSaga(e, tx, parent.id, `compensation of "${spec.name}" failed: ${why}`);
  }
  // A child completed under a version no runtime here knows any more (the parent's definition
  // now names another) failed here with a TypeError, retried (found in an audit).
  const childEntry = e.entries.get(entryKey(child.name, child.version));
  // Dead at once, not retried: its dead job is what `retryFailed` runs again once the runtime
  // has the definition.
  if (!childEntry) {
    throw new NonRetryableError(
      `child saga "${id}" is version ${child.version} of "${child.name}", which no runtime here ` +
        'knows: give the runtime that definition too, then retry the saga (retryFailed)',
    );
  }
  const reason = `parent saga "${parent.id}" compensates: ${parent.error ?? 'compensating'}`;
  // First: the child's end may move the parent on within this very transaction.
  // The compensation's row keeps its job (the pointer lets go of it next); the child's end
  // settles it.
  await e.sql(tx, settleStep({ ...key, status: 'pending' }));
  await e.sql(tx, clearCurrentJob(parent.id));
  await e.sql(tx, reopenForCompensation(id, reason.slice(0, 2_000)));
  const reopened = { ...child, status: 'compensating' as const, cancel_requested: false };
  await compensateNext(e, tx, childEntry, reopened, childEntry.steps.length);
  return 'compensating';
}

/**
 * Starts the first saga queued for a lock key that no saga holds, under the key's turn lock (so
 * a concurrent start either sees it started or queues behind it); with `wait: false` (the
 * reconciler) only if that lock is free at once. Its first job is not handed to this worker: the
 * hand-off belongs to the saga that just moved. A version no runtime here knows stays queued for
 * one that does (the reconciler looks for such keys), or for an operator's cancel.
 */
export async function startNextInLine(
  e: Engine,
  tx: Queryable,
  name: string,
  key: string,
  wait = true,
): Promise<string | null> {
  if (!(await takeKeyTurn(tx, name, key, wait))) return null;
  const next = (await runSql<SagaRow>(tx, lockNextQueued(name, key))).rows[0];
  if (!next) return null;
  const entry = e.entries.get(entryKey(next.name, next.version));
  if (!entry) {
    // Warned once per saga: the reconciler finds its key again on every pass, and the same line
    // came every `intervalMs` (5 s by default) for as long as the saga stayed queued.
    const level = e.notices.first(`lock_turn_unknown_version:${next.id}`) ? 'warn' : 'debug';
    e.logger[level](
      { reason: 'lock_turn_unknown_version', sagaId: next.id, saga: name, version: next.version },
      'next saga for a lock key left queued: no runtime here knows its version',
    );
    return null;
  }
  const own = { ...e, handOff: undefined };
  await inSagaTrace(e.tracer, next, 'turn', () => enterStep(own, tx, entry, next.id, 0));
  e.logger.info({ reason: 'saga_turn', sagaId: next.id, saga: name }, 'queued saga started');
  return next.id;
}
