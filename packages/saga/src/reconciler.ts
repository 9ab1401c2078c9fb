import {
  IntervalService,
  jobStates,
  jobStatesByKey,
  LockKeys,
  runSql,
  tryAdvisoryLock,
  withTransaction,
  type JobState,
} from '@skiplock/queue/engine';
import { entryKey, type Engine } from './engine.js';
import { timeoutKey } from './keys.js';
import { lockSaga, type SagaRow } from './sql/sagas.js';
import { inSagaTrace } from './tracing.js';
import {
  selectLiveSagas,
  selectStrandedParents,
  type StrandedChildRow,
  type StrandedPageRow,
  selectWaitingSagas,
  type LiveSagaRow,
  type WaitingSagaRow,
} from './sql/reconcile.js';
import { settleStep } from './sql/steps.js';
import { selectQueuedKeys, type QueuedKeyRow } from './sql/locks.js';
import {
  advanceAfter,
  failSaga,
  failStep,
  OUTCOMES,
  resumeEndedChild,
  startNextInLine,
  type Transition,
} from './transitions.js';

export interface ReconcileResult {
  /** False when another process held the reconciler lock, so this pass did nothing. */
  ran: boolean;
  /** Sagas moved on: to compensation, or to `failed`. */
  reconciled: number;
  sagaIds: string[];
  /**
   * A page of sagas was left for the next pass (each pass reads `batchSize` of each kind, going on
   * where the last stopped): run it again to have looked at every one.
   */
  more: boolean;
  /**
   * Stranded sagas this pass found and left as they are, since this runtime does not define their
   * version (or the step they are on): with `unknownVersions: 'leave'`; and in either mode a
   * parent of such a version whose child ended (a runtime that defines it moves it on). Logged
   * once a pass, as a count (reason `saga_reconcile_unknown_version_left`).
   */
  left: string[];
}

/** What a pass does with a stranded saga whose version (or current step) is not defined here. */
export const UNKNOWN_VERSION_POLICIES = ['leave', 'fail'] as const;
export type UnknownVersionPolicy = (typeof UNKNOWN_VERSION_POLICIES)[number];

export interface ReconcilerOptions {
  /** Pause between passes (default 5,000 ms). */
  intervalMs?: number | undefined;
  /** Most sagas one pass handles (default 100). */
  batchSize?: number | undefined;
  /**
   * A stranded saga whose version this runtime does not define (or whose step its version
   * lacks): `'leave'` (default) leaves it as it is, for the reconciler of a runtime that defines
   * it, which compensates its completed steps; `'fail'` fails it at once, without compensation,
   * since nothing here knows what its steps undo. One pass runs at a time across hosts, so in a
   * rolling deploy a host that dropped a version would otherwise fail, uncompensated, the sagas
   * a host still running it would have compensated. `'fail'` is for a version retired for good:
   * no runtime will define it again, and its sagas should end rather than stay stranded.
   */
  unknownVersions?: UnknownVersionPolicy | undefined;
}

export interface Reconciler {
  runOnce(): Promise<ReconcileResult>;
  start(): void;
  stop(): Promise<void>;
}

/**
 * Moves on live sagas whose current job can no longer move them. A job that dies runs its saga's
 * dead-letter hook in the transaction that kills it, on the worker that ran it and in the sweeper
 * of a worker that defines its type, and that moves the saga; what is left for this pass is what
 * no hook can see: a job killed by a sweeper or worker that does not define the saga's version
 * (`unknown_type`, or an expired lease swept on such a host), a job an operator cancelled, and a
 * job deleted by hand. It also starts the first saga queued for a lock key that no saga holds
 * (see `reconcileQueues`). A step is then treated as failed for good (compensate, or `failed` past
 * the pivot); a compensation makes the saga `failed`. A saga whose version (or step) this runtime
 * does not define is left for a runtime that does, or failed (`unknownVersions`). One pass at a
 * time across all hosts (the `sagaReconcile` advisory lock); each pass reads one page of each
 * kind (live sagas least recently moved first, waiting sagas and candidate parents oldest first),
 * and the next pass goes on after it, so sagas that are merely slow (or left) never hide a
 * stranded one for more than one round.
 */
export function createReconciler(e: Engine, options: ReconcilerOptions = {}): Reconciler {
  const intervalMs = options.intervalMs ?? 5_000;
  const batchSize = options.batchSize ?? 100;
  const unknownVersions = options.unknownVersions ?? 'leave';
  if (!Number.isInteger(intervalMs) || intervalMs < 10 || intervalMs > 3_600_000) {
    throw new TypeError('reconciler intervalMs must be an integer from 10 to 3600000');
  }
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000) {
    throw new TypeError('reconciler batchSize must be an integer from 1 to 10000');
  }
  if (!UNKNOWN_VERSION_POLICIES.includes(unknownVersions)) {
    throw new TypeError(
      `reconciler unknownVersions must be 'leave' or 'fail', got ${describe(unknownVersions)}`,
    );
  }

  // The pass over live sagas holds a page of them locked: a saga it ends does not wait there for
  // its lock key's turn (see `endSaga`).
  const inPass: typeof e = { ...e, waitForKeyTurn: false };

  /** Moves one stranded live saga on; false when it is left (see `unknownVersions`). */
  async function reconcileOne(
    tx: Parameters<typeof failSaga>[1],
    row: LiveSagaRow,
    job: JobState | undefined,
  ): Promise<boolean> {
    const saga = (await runSql<SagaRow>(tx, lockSaga(row.id))).rows[0]!;
    const why = job
      ? `job ${saga.current_job_id} is ${job.status}: ${job.lastError ?? 'no error recorded'}`
      : `job ${saga.current_job_id} no longer exists`;
    const entry = e.entries.get(entryKey(saga.name, saga.version));
    const step = saga.current_step!;
    // Nothing is written when an attempt starts: what the job made is known only from the job.
    const attempt = job && { attempt: job.attempts, startedAt: job.lockedAt };
    let transition: Transition;
    if (!entry || (saga.current_kind === 'step' && !entry.steps.some((s) => s.name === step))) {
      // An unknown version, or a step its definition lacks (renamed without a new version;
      // before, failStep threw on it and rolled back the whole pass, every other stranded saga's
      // too): nothing here knows what it compensates. Left for a runtime that does, unless told
      // to fail it (a host of a rolling deploy that dropped the version failed, uncompensated,
      // the sagas a host still running it would have compensated). A stranded compensation is
      // left too: a runtime that defines it fails the saga just the same, with its own words.
      if (unknownVersions === 'leave') return false;
      transition = await failUndefined(tx, saga, saga.current_kind ?? 'step', why, attempt);
    } else if (saga.current_kind === 'step') {
      const index = entry.steps.findIndex((s) => s.name === step);
      transition = await inSagaTrace(e.tracer, saga, `reconcile ${step}`, () =>
        failStep(inPass, tx, entry, saga, index, why, 'failed', attempt),
      );
    } else {
      await runSql(
        tx,
        settleStep({
          sagaId: saga.id,
          step,
          kind: 'compensation',
          status: 'failed',
          error: why,
          attempt,
        }),
      );
      transition = await failSaga(inPass, tx, saga.id, `compensation of "${step}" failed: ${why}`);
    }
    if (OUTCOMES.has(transition)) {
      e.metrics.outcomes.inc({ saga: saga.name, step, outcome: transition });
    }
    e.logger.warn(
      { reason: 'saga_reconciled', sagaId: saga.id, step, outcome: transition },
      'stranded saga moved on',
    );
    return true;
  }

  /** Every queue this runtime's saga jobs go to; its definitions are fixed, so made once. */
  let queues: readonly string[] | null = null;
  function sagaQueues(): readonly string[] {
    if (queues) return queues;
    const found = new Set<string>();
    for (const entry of e.entries.values()) {
      for (const job of [...entry.runJobs, ...entry.compensateJobs, ...entry.timeoutJobs]) {
        if (job) found.add(job.queue);
      }
    }
    return (queues = [...found]);
  }

  /**
   * Fails a saga no definition here can move on (an unknown version, or a step its version
   * lacks): the step it was on ends failed too, so the history keeps it (and its job).
   */
  async function failUndefined(
    tx: Parameters<typeof failSaga>[1],
    saga: SagaRow,
    kind: 'step' | 'compensation',
    why: string,
    attempt?: { attempt: number; startedAt: Date | null },
  ): Promise<Transition> {
    const step = saga.current_step!;
    await runSql(
      tx,
      settleStep({ sagaId: saga.id, step, kind, status: 'failed', error: why, attempt }),
    );
    const entry = e.entries.get(entryKey(saga.name, saga.version));
    const cause = entry
      ? `version ${saga.version} of saga "${saga.name}" has no step "${step}" (renamed without a new version?)`
      : `no runtime here knows saga "${saga.name}" version ${saga.version}`;
    return failSaga(inPass, tx, saga.id, `${why}; ${cause}`);
  }

  // Where the next pass goes on: after the last saga this one read, or from the start.
  let cursor: { updatedAt: string; id: string } | null = null;
  let waitingCursor: { createdAt: string; id: string } | null = null;

  /**
   * Waiting sagas whose wait has a timeout job that can no longer end it (dead without its hook,
   * cancelled, deleted): the wait fails as its timeout would, so no saga waits for good.
   */
  async function reconcileWaiting(
    tx: Parameters<typeof failSaga>[1],
    left: Set<string>,
  ): Promise<string[]> {
    const page = (await runSql<WaitingSagaRow>(tx, selectWaitingSagas(batchSize, waitingCursor)))
      .rows;
    const last = page.at(-1);
    waitingCursor =
      page.length === batchSize && last ? { createdAt: last.created_at, id: last.id } : null;
    const expected: { row: WaitingSagaRow; index: number; queue: string; key: string }[] = [];
    for (const row of page) {
      const entry = e.entries.get(entryKey(row.name, row.version));
      const index = entry?.steps.findIndex((s) => s.name === row.current_step) ?? -1;
      if (index === -1) {
        // A version no runtime here knows (retired while its sagas slept or waited), or a step
        // its definition lacks: whether the wait is timed is not known, but its timeout or wake
        // job, if it has one, died of that too (unknown_type). Looked for in every queue this
        // runtime's sagas use; found ended, the saga fails (before, it waited for good). Not
        // after the pivot: a wait an operator retried there waits on with no timeout job, and
        // the dead one of its first wait is still under the key (found in review).
        if (row.pivoted) continue;
        const key = timeoutKey(row.id, row.current_step);
        for (const queue of sagaQueues()) expected.push({ row, index, queue, key });
        continue;
      }
      const spec = entry?.steps[index];
      const timeoutJob = entry?.timeoutJobs[index];
      // The same condition under which entering the wait enqueued its timeout job; a sleep
      // always has its wake job. A wait after the pivot is left alone: failing it would undo
      // nothing, and one an operator retried waits on purpose with no timeout job.
      const timed =
        spec?.sleep != null ||
        (!row.pivoted && (spec?.wait?.timeoutMs != null || row.has_deadline));
      if (!timeoutJob || !timed) continue;
      expected.push({ row, index, queue: timeoutJob.queue, key: timeoutKey(row.id, spec!.name) });
    }
    const jobs = await jobStatesByKey(tx, expected);
    const failed: string[] = [];
    for (const { row, index, queue, key } of expected) {
      const job = jobs.get(`${queue}\0${key}`);
      // A timeout or wake job stopped while it ran (`stopping`) is not waited for, unlike a
      // step's: its handler runs no user code, only the saga's own transition, which locks the
      // saga row as this pass does and is fenced by the job, so it cannot act beside this one.
      if (job && job.status !== 'dead' && job.status !== 'cancelled') continue;
      // Without a definition, only a job found ended says the wait can no longer end: none
      // found may be a wait with no timeout, which a signal ends. Once per saga, whichever
      // queue held the job.
      if (index === -1 && (!job || failed.includes(row.id))) continue;
      // Its timeout or wake job ended, but what the wait's end undoes is a runtime's that
      // defines it (see `unknownVersions`).
      if (index === -1 && unknownVersions === 'leave') {
        left.add(row.id);
        continue;
      }
      const why = job
        ? `timeout job ${job.id} is ${job.status}: ${job.lastError ?? 'no error recorded'}`
        : `timeout job ${key} no longer exists`;
      const saga = (await runSql<SagaRow>(tx, lockSaga(row.id))).rows[0]!;
      const entry = e.entries.get(entryKey(row.name, row.version));
      // After the pivot a sleep whose wake job is lost only ends early: the saga goes on.
      const onward = index !== -1 && saga.pivoted && entry!.steps[index]!.sleep !== null;
      const transition = await inSagaTrace(e.tracer, saga, `reconcile ${row.current_step}`, () =>
        index === -1
          ? failUndefined(tx, saga, 'step', why)
          : onward
            ? advanceAfter(inPass, tx, entry!, saga, index, null)
            : failStep(inPass, tx, entry!, saga, index, why),
      );
      if (OUTCOMES.has(transition)) {
        e.metrics.outcomes.inc({ saga: row.name, step: row.current_step, outcome: transition });
      }
      e.logger.warn(
        { reason: 'saga_reconciled', sagaId: row.id, step: row.current_step, outcome: transition },
        'waiting saga moved on',
      );
      failed.push(row.id);
    }
    return failed;
  }

  let queueCursor: { name: string; key: string } | null = null;
  let parentCursor: { createdAt: string; id: string } | null = null;

  /**
   * Lock keys with sagas queued and none active (the end of the last holder ran where no runtime
   * knew the next one's version, or a holder row was deleted by hand): the first in line starts.
   * A key whose turn lock a caller's transaction holds (a start in `tx`) is skipped (it has a
   * start in flight) and looked at again on the next round.
   */
  async function reconcileQueues(tx: Parameters<typeof failSaga>[1]): Promise<string[]> {
    const scan = batchSize * 10;
    const keys = (await runSql<QueuedKeyRow>(tx, selectQueuedKeys(scan, queueCursor))).rows;
    const last = keys.at(-1);
    // The next pass goes on after this page's last key (from the start once a page is not
    // full), so keys that cannot start never hide the others.
    const full = keys.reduce((n, k) => n + k.queued, 0) === scan;
    queueCursor = full && last ? { name: last.name, key: last.lock_key } : null;
    const started: string[] = [];
    for (const { name, lock_key } of keys.filter((k) => k.orphan).slice(0, batchSize)) {
      const id = await startNextInLine(e, tx, name, lock_key, false);
      if (id === null) continue;
      e.logger.warn({ reason: 'saga_reconciled', sagaId: id }, 'queued saga started');
      started.push(id);
    }
    return started;
  }

  /**
   * Parents still waiting on (or compensating) a child saga that has ended: the child ended where
   * no runtime knew the parent's version, or an operator's retry came between. Locks each parent
   * before its ended child (`resumeEndedChild`), as a parent's compensation reopening its ended
   * children does.
   */
  async function reconcileChildren(
    tx: Parameters<typeof failSaga>[1],
    left: Set<string>,
  ): Promise<string[]> {
    const scan = batchSize * 10;
    const rows = (
      await runSql<StrandedPageRow>(tx, selectStrandedParents(batchSize, scan, parentCursor))
    ).rows;
    const ended = rows.filter((r): r is StrandedPageRow & StrandedChildRow => r.id !== null);
    // The next pass goes on after this page (from the start once a page is not full), or after
    // its last stranded parent when it found as many as one pass moves: parents this runtime
    // cannot move (their version unknown here) stay where they are, and a full page of them hid
    // every parent after it (noticed in review).
    const last = ended.at(-1);
    const end = rows[0];
    parentCursor =
      ended.length === batchSize && last
        ? { createdAt: last.created_at, id: last.parent }
        : end && end.scanned === scan
          ? { createdAt: end.page_end_at, id: end.page_end_id }
          : null;
    const moved: string[] = [];
    for (const { id, parent, parent_name, parent_version, parent_step } of ended) {
      // The check `resumeParent` makes, made first: it warns (child_parent_unknown) for each
      // such parent, which from here was every pass (a page of warnings every 5 s). Left in
      // either mode: failing the parent here would not undo its steps either.
      const entry = e.entries.get(entryKey(parent_name, parent_version));
      if (!entry?.steps.some((s) => s.name === parent_step && (s.child || s.parallel))) {
        left.add(parent);
        continue;
      }
      const transition = await resumeEndedChild(e, tx, id);
      if (transition === null || transition === 'stale') continue;
      e.logger.warn({ reason: 'saga_reconciled', sagaId: id }, "ended child's parent moved on");
      moved.push(id);
    }
    return moved;
  }

  /**
   * What waits on sagas that ended unseen (queues, parents), in a transaction of its own after
   * the pass over live sagas has committed: the key and child locks it takes never hold up the
   * sagas that pass locked.
   */
  function reconcileEnds(left: Set<string>): Promise<string[]> {
    return withTransaction(e.pool, async (tx) => {
      if (!(await tryAdvisoryLock(tx, LockKeys.sagaReconcile))) return [];
      return [...(await reconcileQueues(tx)), ...(await reconcileChildren(tx, left))];
    });
  }

  async function runOnce(): Promise<ReconcileResult> {
    // A saga may be met twice in a pass (a waiting parent, by its wait and by its child).
    const left = new Set<string>();
    const stranded = await withTransaction(e.pool, async (tx) => {
      if (!(await tryAdvisoryLock(tx, LockKeys.sagaReconcile))) return null;
      const live = (await runSql<LiveSagaRow>(tx, selectLiveSagas(batchSize, cursor))).rows;
      const last = live.at(-1);
      cursor =
        live.length === batchSize && last ? { updatedAt: last.updated_at, id: last.id } : null;
      const jobs = await jobStates(
        tx,
        live.map((r) => r.current_job_id),
      );
      const stranded: string[] = [];
      for (const row of live) {
        const job = jobs.get(row.current_job_id);
        if (job && job.status !== 'dead' && job.status !== 'cancelled') continue;
        // A step an operator stopped while it ran (`cancelJob(id, { running: true })`): its
        // handler may still be at work, so its compensation waits until it has returned (the
        // worker then clears the job's lease) or the lease runs out. Failed at once, it started
        // undoing the step beside the handler still doing it.
        if (job?.stopping) continue;
        if (await reconcileOne(tx, row, job)) stranded.push(row.id);
        else left.add(row.id);
      }
      stranded.push(...(await reconcileWaiting(tx, left)));
      return stranded;
    });
    if (stranded === null) {
      return { ran: false, reconciled: 0, sagaIds: [], more: false, left: [] };
    }
    stranded.push(...(await reconcileEnds(left)));
    if (stranded.length > 0) e.metrics.reconciled.inc(stranded.length);
    // Left sagas keep their place (they do not move), so every round of passes reads
    // them again: one line a pass, not one a saga, keeps that from flooding the log.
    if (left.size > 0) {
      e.logger.warn(
        {
          reason: 'saga_reconcile_unknown_version_left',
          count: left.size,
          sagaIds: [...left].slice(0, 10),
          unknownVersions,
        },
        'stranded sagas left as they are: this runtime does not define their version (or the ' +
          "step they are on); a runtime's reconciler that does moves them on",
      );
    }
    const more = cursor !== null || waitingCursor !== null || parentCursor !== null;
    return { ran: true, reconciled: stranded.length, sagaIds: stranded, more, left: [...left] };
  }

  // The queue's own loop for singleton passes: one abort listener per sleep, removed when the
  // sleep ends. The hand-written loop here added one per pass and never removed it (about 2 MiB
  // of heap in 40 s at a 10 ms interval, and MaxListenersExceededWarning).
  const service = new IntervalService('saga-reconciler', intervalMs, runOnce, e.logger);

  return {
    runOnce,
    start: () => service.start(),
    stop: () => service.stop(),
  };
}

/** A bad option's value as the error names it: a string quoted, anything else as it prints. */
function describe(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value) : String(value);
}
