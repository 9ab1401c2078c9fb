import {
  defineJob,
  NonRetryableError,
  type AnyJobDefinition,
  type DeadJobInfo,
  type JobContext,
} from '@skiplock/queue';
import {
  completeWithStatement,
  errorMessage,
  findJsonProblem,
  handedOffCarry,
  jobStates,
} from '@skiplock/queue/engine';
import type pg from 'pg';
import { z } from 'zod';
import type { BranchInput } from './branch.js';
import { Completion } from './completion.js';
import type { AnySagaDefinition, StepSpec } from './define.js';
import { MAX_SLEEP_MS } from './define.js';
import type { CompensationContext, RetryPolicy, StepContext, StepOutputs } from './step.js';
import { handingOff, SagaSnapshot, type Engine, type SagaEntry } from './engine.js';
import { compensationKey, jobType, sagaIdOfKey, stepKey } from './keys.js';
import { SagaDeadlineError } from './errors.js';
import { enterParallel } from './parallel.js';
import { inSagaTrace, inStepSpan, noteTransition } from './tracing.js';
import { invalidInput, issuesAt, storedJsonIssues, validate } from './standard.js';
import {
  databaseNowMs,
  loadAttempt,
  lockAndComplete,
  lockSaga,
  lockSagaOfJob,
  type SagaRow,
} from './sql/sagas.js';
import { consumeSignal, selectSignal } from './sql/signals.js';
import { recordAttemptError, settleStep, type AttemptMark } from './sql/steps.js';
import {
  advanceAfter,
  compensateChild,
  compensateNext,
  enterChild,
  enterSleep,
  enterWaiting,
  failSaga,
  failStep,
  isCurrent,
  moveOnAfter,
  OUTCOMES,
  type Transition,
} from './transitions.js';

const payload = z.object({ sagaId: z.string().min(1) });
type Payload = z.output<typeof payload>;

/** Retriable steps are retried "until they succeed": the queue's attempt ceiling. */
const RETRIABLE_MAX_ATTEMPTS = 1_000;
const STEP_MAX_ATTEMPTS = 5;
const COMPENSATION_MAX_ATTEMPTS = 10;

/** A job's options from its policy; the saga's `leaseMs` where the policy sets none. */
function jobOptions(policy: RetryPolicy, defaultAttempts: number, sagaLeaseMs: number | null) {
  const leaseMs = policy.leaseMs ?? sagaLeaseMs;
  return {
    maxAttempts: policy.maxAttempts ?? defaultAttempts,
    ...(policy.backoff ? { backoff: policy.backoff } : {}),
    ...(policy.timeoutMs ? { timeoutMs: policy.timeoutMs } : {}),
    ...(leaseMs ? { leaseMs } : {}),
    ...(policy.nonRetryable ? { nonRetryable: policy.nonRetryable } : {}),
  };
}

/** Loads the saga and its step outputs for an attempt, in one statement (see `loadAttempt`). */
async function loadSaga(e: Engine, sagaId: string): Promise<SagaRow & { outputs: StepOutputs }> {
  const { rows } = await e.sql<SagaRow & { outputs: StepOutputs }>(e.pool, loadAttempt({ sagaId }));
  if (!rows[0]) throw new NonRetryableError(`saga "${sagaId}" does not exist`);
  return rows[0];
}

/**
 * The saga for a step's attempt: carried from the transaction that handed its job to this worker
 * (see `SagaSnapshot`), else read. A pivot always reads: it is the last step a cancel can stop,
 * and a cancel that came between the hand-off's commit and this start is not in the carried
 * snapshot, so the pivot would run and the cancel be ignored (`cancel_too_late`). One statement
 * for the one pivot step of a saga that has one.
 */
async function sagaForAttempt(
  e: Engine,
  sagaId: string,
  job: JobContext,
  pivot: boolean,
): Promise<SagaRow & { outputs: StepOutputs }> {
  const carried = pivot ? undefined : handedOffCarry(job);
  return (carried instanceof SagaSnapshot && carried.rowOf(sagaId)) || loadSaga(e, sagaId);
}

/** Outputs of the steps defined before `index` only: later ones are not in the step's type. */
function outputsBefore(entry: SagaEntry, outputs: StepOutputs, index: number): StepOutputs {
  const visible: StepOutputs = {};
  for (const step of entry.steps.slice(0, index)) {
    if (step.name in outputs) visible[step.name] = outputs[step.name];
  }
  return Object.freeze(visible);
}

async function parseInput(entry: SagaEntry, saga: SagaRow): Promise<unknown> {
  const parsed = await validate(entry.def.input, saga.input);
  if (parsed.issues) {
    throw invalidInput(
      `saga "${saga.id}": stored input no longer matches its schema`,
      issuesAt('input', parsed.issues),
    );
  }
  return parsed.value;
}

/** A signal that also fires at the saga's deadline (before the pivot only). */
function withDeadline(saga: SagaRow, signal: AbortSignal): { signal: AbortSignal; clear(): void } {
  if (saga.pivoted || saga.deadline_left_ms === null) return { signal, clear: () => {} };
  const controller = new AbortController();
  const forward = () => controller.abort(signal.reason);
  if (signal.aborted) forward();
  signal.addEventListener('abort', forward, { once: true });
  const timer = longTimeout(
    () => controller.abort(new SagaDeadlineError(saga.id)),
    Math.max(0, saga.deadline_left_ms),
  );
  return {
    signal: controller.signal,
    clear: () => {
      timer.clear();
      signal.removeEventListener('abort', forward);
    },
  };
}

/** Node's longest timer, 2^31-1 ms (about 24.8 days); a longer delay fires after 1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * `setTimeout` for any delay: one past Node's cap (a deadline weeks away) is reached by chaining
 * timers of at most the cap, where a single timer would fire after 1 ms.
 */
function longTimeout(fire: () => void, ms: number): { clear(): void } {
  let timer: ReturnType<typeof setTimeout>;
  const arm = (left: number) => {
    timer = setTimeout(
      left > MAX_TIMER_MS ? () => arm(left - MAX_TIMER_MS) : fire,
      Math.min(left, MAX_TIMER_MS),
    );
  };
  arm(ms);
  return { clear: () => clearTimeout(timer) };
}

/**
 * Waits for `running` until it settles or `signal` fires, whichever comes first; the caller keeps
 * `running`, to wait for it after the race when it must (see `runStep`).
 */
async function raceSignal<T>(running: Promise<T>, signal: AbortSignal): Promise<T> {
  let onAbort: (() => void) | null = null;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason);
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
  aborted.catch(() => {});
  try {
    return await Promise.race([running, aborted]);
  } finally {
    if (onAbort) signal.removeEventListener('abort', onAbort);
  }
}

function report(
  e: Engine,
  saga: Pick<SagaRow, 'id' | 'name' | 'version'>,
  step: string,
  transition: Transition,
): void {
  noteTransition(transition);
  const fields = { sagaId: saga.id, saga: saga.name, version: saga.version, step };
  if (transition === 'stale') {
    e.logger.info({ ...fields, reason: 'stale_job' }, 'saga moved on; job did nothing');
    return;
  }
  if (!OUTCOMES.has(transition)) return;
  e.metrics.outcomes.inc({ saga: saga.name, step, outcome: transition });
  const level = transition === 'completed' ? 'info' : 'warn';
  e.logger[level]({ ...fields, reason: `saga_${transition}` }, `saga ${transition}`);
}

interface Prepared {
  saga: SagaRow;
  outputs: StepOutputs;
  input: unknown;
}

function contextFor(
  e: Engine,
  entry: SagaEntry,
  spec: StepSpec,
  kind: 'step' | 'compensation',
  p: Prepared,
  job: JobContext,
  signal: AbortSignal,
  completion: Completion,
): StepContext<unknown, StepOutputs> {
  const idempotencyKey =
    kind === 'step' ? stepKey(p.saga.id, spec.name) : compensationKey(p.saga.id, spec.name);
  return {
    sagaId: p.saga.id,
    sagaName: entry.def.name,
    version: entry.def.version,
    step: spec.name,
    input: p.input,
    steps: outputsBefore(entry, p.outputs, spec.index),
    idempotencyKey,
    attempt: job.job.attempt,
    signal,
    logger: job.logger.child({
      sagaId: p.saga.id,
      saga: entry.def.name,
      step: spec.name,
      kind,
    }),
    transaction: <T>(work: (tx: pg.PoolClient) => Promise<T>) => completion.transaction(work),
  };
}

async function runStep(
  e: Engine,
  entry: SagaEntry,
  spec: StepSpec,
  data: Payload,
  job: JobContext,
) {
  const began = performance.now();
  const attempt = () => ({ attempt: job.job.attempt, startedAgoMs: performance.now() - began });
  const saga = await sagaForAttempt(e, data.sagaId, job, spec.role === 'pivot');
  if (!isCurrent(saga, spec.name, 'step', ['running'])) return report(e, saga, spec.name, 'stale');
  // Cancel and deadline end the step before it runs: its job completes and the saga compensates.
  const deadlinePassed = saga.deadline_left_ms !== null && saga.deadline_left_ms <= 0;
  if (!saga.pivoted && (saga.cancel_requested || deadlinePassed)) {
    return endBeforeRun(e, entry, spec, saga, job, saga.cancel_requested);
  }
  const key = { sagaId: saga.id, step: spec.name, kind: 'step' as const };
  if (spec.wait) return runWait(e, entry, spec, saga, job, attempt);
  if (spec.sleep) return runSleep(e, entry, spec, saga, job, attempt);
  if (spec.child || spec.parallel) return runChild(e, entry, spec, saga, job, attempt);

  const prepared = { saga, outputs: saga.outputs, input: await parseInput(entry, saga) };
  // A next step may be handed to this worker: the completion returns the outputs it would read.
  const onward = spec.index + 1 < entry.steps.length;
  // Locks the saga and records the output in one statement, only if the saga is still here.
  const lock = (output: unknown) =>
    lockAndComplete({
      ...key,
      status: 'running',
      outputJson: JSON.stringify(output ?? null),
      attempt: attempt(),
      outputs: onward,
    });
  const completion = new Completion(
    job,
    async (tx, output, sent) => {
      type Locked = SagaRow & { outputs?: StepOutputs };
      const locked = ((sent ?? (await e.sql<Locked>(tx, lock(output)))).rows as Locked[])[0];
      if (!isCurrent(locked, spec.name, 'step', ['running'])) return 'stale';
      const { outputs, ...row } = locked;
      const snapshot = outputs && new SagaSnapshot(row, outputs, performance.now());
      return moveOnAfter(handingOff(e, job, snapshot), tx, entry, row, spec.index);
    },
    (output) => e.statement(lock(output)),
  );
  const deadline = withDeadline(saga, job.signal);
  const ctx = contextFor(e, entry, spec, 'step', prepared, job, deadline.signal, completion);
  const point = { ...key, sagaName: entry.def.name, attempt: job.job.attempt };
  // The step's code, once started: waited for after an abort of the job's own signal (below).
  let running: Promise<unknown> | undefined;
  try {
    await e.faults?.({ ...point, phase: 'before' });
    running = Promise.resolve().then(() => spec.run!(ctx, prepared.input));
    const value = await raceSignal(running, deadline.signal);
    // Later steps read the output back from jsonb; hand them exactly that, in every process.
    const output = value === undefined ? null : storedOutput(spec.name, value);
    await e.faults?.({ ...point, phase: 'after' });
    report(e, saga, spec.name, await completion.finish(output));
  } catch (error) {
    completion.abandon(error);
    if (deadline.signal.reason instanceof SagaDeadlineError && !job.signal.aborted) {
      // The step ran until the deadline cut it off: its attempt counts.
      return endBeforeRun(e, entry, spec, saga, job, false, attempt());
    }
    await e
      .sql(e.pool, recordAttemptError({ ...key, message: errorMessage(error), attempt: attempt() }))
      .catch(() => {});
    // The job's own signal fired (an operator's stop, a timeout, a lost lease, shutdown) while the
    // step's code runs on: the handler returns only once that code has. The executor has ended
    // the attempt already and tracks the handler as overrunning, so nothing waits for it but the
    // run's slot and a stopped run's lease, which is what keeps the saga from compensating beside
    // the code (the reconciler waits for a stopped run). Returning at the abort, the worker
    // cleared that lease at its next renewal, and the next pass undid the saga beside the step
    // still at work (found in an audit). Only the saga's deadline (above) cuts the code off.
    if (job.signal.aborted) await running?.catch(() => {});
    throw error;
  } finally {
    deadline.clear();
  }
}

/**
 * A step's output as stored and read back: JSON, then jsonb. One that cannot be stored (a BigInt,
 * a cycle, a NUL or lone surrogate in a string) is refused as non-retryable, naming where: it
 * failed in the completion instead, after the step's effect, and every retry ran the effect
 * again to fail the same way (found in an audit).
 */
function storedOutput(step: string, value: unknown): unknown {
  let stored: unknown;
  try {
    stored = JSON.parse(JSON.stringify(value)) as unknown;
  } catch (error) {
    throw new NonRetryableError(
      `step "${step}" returned an output JSON cannot hold: ${errorMessage(error)}`,
    );
  }
  const problem = findJsonProblem(stored, 'output');
  if (problem) {
    throw new NonRetryableError(
      `step "${step}" returned an output that cannot be stored: ${problem.path} ${problem.message}`,
    );
  }
  return stored;
}

/**
 * `job.completeWith(work)` whose transaction starts by locking saga `sagaId`: the lock goes in
 * the same write as BEGIN and the job's fence (see `completeWithStatement`), one round trip
 * fewer, and `work` gets the locked row (undefined when the saga is gone).
 */
function completeLocked<T>(
  e: Engine,
  job: JobContext,
  sagaId: string,
  work: (tx: pg.PoolClient, locked: SagaRow | undefined) => Promise<T>,
): Promise<T> {
  return completeWithStatement(job, e.statement(lockSaga(sagaId)), (tx, first) =>
    work(tx, first.rows[0] as SagaRow | undefined),
  );
}

/**
 * Ends a step for a cancel or the deadline: the job completes, the saga compensates. `attempt`
 * when the step's code had started (the deadline cut it off), so its history counts the attempt.
 */
async function endBeforeRun(
  e: Engine,
  entry: SagaEntry,
  spec: StepSpec,
  saga: SagaRow,
  job: JobContext,
  cancelled: boolean,
  attempt?: AttemptMark,
) {
  const transition = await completeLocked(e, job, saga.id, async (tx, locked) => {
    if (!isCurrent(locked, spec.name, 'step', ['running'])) return 'stale' as const;
    const ended = handingOff(e, job);
    return cancelled
      ? failStep(ended, tx, entry, locked, spec.index, 'cancelled', 'cancelled', attempt)
      : failStep(ended, tx, entry, locked, spec.index, 'deadline exceeded', 'failed', attempt);
  });
  report(e, saga, spec.name, transition);
}

/**
 * A cancel that came while a wait's or sleep's own job ran could only flag the saga (its job was
 * not queued to cancel): compensate now instead of parking it until the signal or wake time.
 */
function cancelledMeanwhile(
  e: Engine,
  job: JobContext,
  tx: pg.PoolClient,
  entry: SagaEntry,
  locked: SagaRow,
  spec: StepSpec,
  attempt: () => AttemptMark,
): Promise<Transition> | null {
  if (!locked.cancel_requested || locked.pivoted) return null;
  const ended = handingOff(e, job);
  return failStep(ended, tx, entry, locked, spec.index, 'cancelled', 'cancelled', attempt());
}

/** A wait step: take the signal if it already arrived, else park the saga until it does. */
async function runWait(
  e: Engine,
  entry: SagaEntry,
  spec: StepSpec,
  saga: SagaRow,
  job: JobContext,
  attempt: () => AttemptMark,
) {
  const wait = spec.wait!;
  const transition = await completeLocked(e, job, saga.id, async (tx, locked) => {
    if (!isCurrent(locked, spec.name, 'step', ['running'])) return 'stale' as const;
    const cancelled = cancelledMeanwhile(e, job, tx, entry, locked, spec, attempt);
    if (cancelled) return cancelled;
    const { rows } = await e.sql<{ payload: unknown }>(tx, selectSignal(saga.id, wait.signal));
    if (!rows[0]) return enterWaiting(e, tx, entry, locked, spec.index, attempt());
    const parsed = await validate(wait.payload, rows[0].payload);
    if (parsed.issues) {
      return failStep(
        handingOff(e, job),
        tx,
        entry,
        locked,
        spec.index,
        `signal "${wait.signal}" is invalid`,
        'failed',
        attempt(),
      );
    }
    await e.sql(tx, consumeSignal(saga.id, wait.signal));
    return advanceAfter(
      handingOff(e, job),
      tx,
      entry,
      locked,
      spec.index,
      JSON.parse(JSON.stringify(parsed.value ?? null)),
      attempt(),
    );
  });
  report(e, saga, spec.name, transition);
}

/**
 * A sleep step: works out when to wake (a function of the saga runs here, once), then parks the
 * saga until its wake job is due, or moves on at once when that moment has passed.
 */
async function runSleep(
  e: Engine,
  entry: SagaEntry,
  spec: StepSpec,
  saga: SagaRow & { outputs: StepOutputs },
  job: JobContext,
  attempt: () => AttemptMark,
) {
  const sleep = spec.sleep!;
  await e.faults?.({
    sagaId: saga.id,
    sagaName: entry.def.name,
    step: spec.name,
    kind: 'step',
    attempt: job.job.attempt,
    phase: 'before',
  });
  let delayMs = sleep.ms ?? 0;
  let until: Date | null = null;
  if (sleep.until) {
    until = sleep.until({
      sagaId: saga.id,
      input: await parseInput(entry, saga),
      steps: outputsBefore(entry, saga.outputs, spec.index),
    });
    if (!(until instanceof Date) || Number.isNaN(until.getTime())) {
      throw new NonRetryableError(
        `sleep step "${spec.name}": its function returned ${until instanceof Date ? 'an invalid Date' : typeof until}, not the Date to wake`,
      );
    }
  }
  const transition = await completeLocked(e, job, saga.id, async (tx, locked) => {
    if (!isCurrent(locked, spec.name, 'step', ['running'])) return 'stale' as const;
    const cancelled = cancelledMeanwhile(e, job, tx, entry, locked, spec, attempt);
    if (cancelled) return cancelled;
    if (until) {
      const { rows } = await e.sql<{ now_ms: number }>(tx, databaseNowMs());
      delayMs = Math.min(until.getTime() - rows[0]!.now_ms, MAX_SLEEP_MS);
    }
    if (delayMs <= 0) {
      return advanceAfter(handingOff(e, job), tx, entry, locked, spec.index, null, attempt());
    }
    return enterSleep(e, tx, entry, locked, spec.index, delayMs, attempt());
  });
  report(e, saga, spec.name, transition);
}

/**
 * The input a child step's saga starts with: the child's input function of this saga (run here,
 * once per attempt), checked as a start checks it (the schema, then what JSON can hold), naming
 * the child; or, for a parallel group, what every branch gets (`BranchInput`).
 */
async function childInputJson(
  entry: SagaEntry,
  spec: StepSpec,
  saga: SagaRow & { outputs: StepOutputs },
): Promise<string> {
  const steps = outputsBefore(entry, saga.outputs, spec.index);
  if (spec.parallel) {
    const branchInput: BranchInput = { sagaId: saga.id, input: saga.input, steps };
    return JSON.stringify(branchInput);
  }
  const child = spec.child!;
  const input = child.input({ sagaId: saga.id, input: await parseInput(entry, saga), steps });
  const parsed = await validate(child.def.input, input);
  const found = parsed.issues
    ? issuesAt('input', parsed.issues)
    : await storedJsonIssues(child.def.input, input, 'input');
  if (found) {
    throw invalidInput(
      `child step "${spec.name}": input of saga "${child.def.name}" is invalid`,
      found,
    );
  }
  return JSON.stringify(input ?? null);
}

/**
 * A child step or a parallel group: works out the input, then starts the child (or every
 * branch) and parks the saga on this step, in one transaction (`enterChild`, `enterParallel`).
 */
async function runChild(
  e: Engine,
  entry: SagaEntry,
  spec: StepSpec,
  saga: SagaRow & { outputs: StepOutputs },
  job: JobContext,
  attempt: () => AttemptMark,
) {
  const point = {
    sagaId: saga.id,
    sagaName: entry.def.name,
    step: spec.name,
    kind: 'step' as const,
  };
  await e.faults?.({ ...point, attempt: job.job.attempt, phase: 'before' });
  const stored = await childInputJson(entry, spec, saga);
  await e.faults?.({ ...point, attempt: job.job.attempt, phase: 'after' });
  const transition = await completeLocked(e, job, saga.id, async (tx, locked) => {
    if (!isCurrent(locked, spec.name, 'step', ['running'])) return 'stale' as const;
    const cancelled = cancelledMeanwhile(e, job, tx, entry, locked, spec, attempt);
    if (cancelled) return cancelled;
    const enter = spec.parallel ? enterParallel : enterChild;
    return enter(handingOff(e, job), tx, entry, locked, spec.index, stored, attempt());
  });
  report(e, saga, spec.name, transition);
}

/**
 * The compensation of a completed child step: the child undoes itself; of a parallel group: its
 * branches undo themselves, at once (`compensateChild`).
 */
async function runChildCompensation(
  e: Engine,
  entry: SagaEntry,
  spec: StepSpec,
  data: Payload,
  job: JobContext,
) {
  // Nothing of the user's runs here: both crash points come before the one transaction.
  const point = { sagaId: data.sagaId, sagaName: entry.def.name, step: spec.name };
  const at = { ...point, kind: 'compensation' as const, attempt: job.job.attempt };
  await e.faults?.({ ...at, phase: 'before' });
  await e.faults?.({ ...at, phase: 'after' });
  const transition = await completeLocked(e, job, data.sagaId, async (tx, locked) => {
    if (!isCurrent(locked, spec.name, 'compensation', ['compensating'])) return 'stale' as const;
    return compensateChild(handingOff(e, job), tx, entry, locked, spec.index);
  });
  report(e, sagaOf(entry.def, data), spec.name, transition);
}

async function runTimeout(
  e: Engine,
  entry: SagaEntry,
  spec: StepSpec,
  data: Payload,
  job: JobContext,
) {
  const wait = spec.wait;
  let afterPivot = false;
  const transition = await completeLocked(e, job, data.sagaId, async (tx, locked) => {
    if (!isCurrent(locked, spec.name, 'step', ['waiting'])) return 'stale' as const;
    afterPivot = locked.pivoted;
    const pastDeadline =
      !locked.pivoted && locked.deadline_left_ms !== null && locked.deadline_left_ms <= 0;
    // A sleep's wake job: the sleep is over, unless it was woken by the deadline.
    if (!wait) {
      const ended = handingOff(e, job);
      return pastDeadline
        ? failStep(ended, tx, entry, locked, spec.index, 'deadline exceeded while sleeping')
        : advanceAfter(ended, tx, entry, locked, spec.index, null);
    }
    const reason = pastDeadline
      ? `deadline exceeded while waiting for signal "${wait.signal}"`
      : `signal "${wait.signal}" did not arrive within ${wait.timeoutMs} ms`;
    return failStep(handingOff(e, job), tx, entry, locked, spec.index, reason);
  });
  const saga = { id: data.sagaId, name: entry.def.name, version: entry.def.version };
  if (!wait) {
    report(e, saga, spec.name, transition);
  } else if (afterPivot && transition === 'failed') {
    // A wait after the pivot: no compensation can follow; an operator must act.
    e.logger.error(
      { sagaId: saga.id, saga: saga.name, step: spec.name, reason: 'wait_expired_after_pivot' },
      'wait timed out after the pivot; the saga failed and needs an operator',
    );
    report(e, saga, spec.name, transition);
  } else if (transition !== 'stale') {
    e.logger.warn(
      { sagaId: data.sagaId, step: spec.name, reason: 'signal_timeout' },
      'wait timed out',
    );
  }
}

async function runCompensation(
  e: Engine,
  entry: SagaEntry,
  spec: StepSpec,
  data: Payload,
  job: JobContext,
) {
  const began = performance.now();
  const attempt = () => ({ attempt: job.job.attempt, startedAgoMs: performance.now() - began });
  const saga = await loadSaga(e, data.sagaId);
  if (!isCurrent(saga, spec.name, 'compensation', ['compensating'])) {
    return report(e, saga, spec.name, 'stale');
  }
  const key = { sagaId: saga.id, step: spec.name, kind: 'compensation' as const };
  const prepared = { saga, outputs: saga.outputs, input: await parseInput(entry, saga) };
  const lock = () => lockAndComplete({ ...key, status: 'compensating', attempt: attempt() });
  const completion = new Completion(
    job,
    async (tx, _output, sent) => {
      const locked = ((sent ?? (await e.sql<SagaRow>(tx, lock()))).rows as SagaRow[])[0];
      if (!isCurrent(locked, spec.name, 'compensation', ['compensating'])) return 'stale';
      return compensateNext(handingOff(e, job), tx, entry, locked, spec.index);
    },
    () => e.statement(lock()),
  );
  const ctx: CompensationContext<unknown, StepOutputs> = {
    ...contextFor(e, entry, spec, 'compensation', prepared, job, job.signal, completion),
    reason: saga.error ?? 'compensating',
  };
  const point = { ...key, sagaName: entry.def.name, attempt: job.job.attempt };
  try {
    await e.faults?.({ ...point, phase: 'before' });
    await spec.compensate!(ctx, prepared.outputs[spec.name] ?? null);
    await e.faults?.({ ...point, phase: 'after' });
    report(e, saga, spec.name, await completion.finish(null));
  } catch (error) {
    completion.abandon(error);
    await e
      .sql(e.pool, recordAttemptError({ ...key, message: errorMessage(error), attempt: attempt() }))
      .catch(() => {});
    throw error;
  }
}

/**
 * The attempts a dead job made, for its history row: when its last lease expired no attempt's end
 * was recorded (the worker was gone), so the count and, lacking an earlier one, the start come
 * from the job (its last claim), read through the queue's engine.
 */
async function deadAttempt(tx: pg.PoolClient, info: DeadJobInfo): Promise<AttemptMark> {
  const job = (await jobStates(tx, [info.id])).get(info.id);
  return { attempt: info.attempt, startedAt: job?.lockedAt ?? null };
}

/** A step's job died (retries spent, non-retryable, timeouts): compensate, in the same tx. */
async function stepDead(
  e: Engine,
  entry: SagaEntry,
  spec: StepSpec,
  tx: pg.PoolClient,
  info: DeadJobInfo,
) {
  const saga = (await e.sql<SagaRow>(tx, lockSagaOfJob(sagaIdOfKey(info.idempotencyKey), info.id)))
    .rows[0];
  if (!isCurrent(saga, spec.name, 'step', ['running'])) return;
  const attempt = await deadAttempt(tx, info);
  // On the worker that ran the step, the first compensation is handed to it (not the sweeper's).
  const ended = handingOff(e, info);
  const transition = await inSagaTrace(e.tracer, saga, `dead ${spec.name}`, () =>
    failStep(
      ended,
      tx,
      entry,
      saga,
      spec.index,
      `${info.reason}: ${info.error}`,
      'failed',
      attempt,
    ),
  );
  report(e, saga, spec.name, transition);
}

async function compensationDead(spec: StepSpec, e: Engine, tx: pg.PoolClient, info: DeadJobInfo) {
  const saga = (await e.sql<SagaRow>(tx, lockSagaOfJob(sagaIdOfKey(info.idempotencyKey), info.id)))
    .rows[0];
  if (!isCurrent(saga, spec.name, 'compensation', ['compensating'])) return;
  const error = `${info.reason}: ${info.error}`;
  await e.sql(
    tx,
    settleStep({
      sagaId: saga.id,
      step: spec.name,
      kind: 'compensation',
      status: 'failed',
      error,
      attempt: await deadAttempt(tx, info),
    }),
  );
  // In a span of the saga's, as a dead step's: the transition is noted there.
  const transition = await inSagaTrace(e.tracer, saga, `dead ${spec.name}`, () =>
    failSaga(e, tx, saga.id, `compensation of "${spec.name}" failed: ${error}`),
  );
  report(e, saga, spec.name, transition);
}

/**
 * A wait's timeout job died (its attempts spent on errors, or its last lease expired): the wait
 * can no longer end by itself, so it fails now as a timeout would, with the job's reason.
 */
async function timeoutDead(
  e: Engine,
  entry: SagaEntry,
  spec: StepSpec,
  tx: pg.PoolClient,
  info: DeadJobInfo,
) {
  // Its payload names the saga; its key does too, for a job that died of a payload gone bad.
  const data = payload.safeParse((await e.client.getJob(info.id, { tx }))?.payload);
  const sagaId = data.success ? data.data.sagaId : sagaIdOfKey(info.idempotencyKey);
  if (sagaId === null) return;
  const saga = (await e.sql<SagaRow>(tx, lockSaga(sagaId))).rows[0];
  if (!isCurrent(saga, spec.name, 'step', ['waiting'])) return;
  const what = spec.wait ? `timeout job of signal "${spec.wait.signal}"` : 'wake job of the sleep';
  const error = `${what} died (${info.reason}): ${info.error}`;
  // After the pivot a sleep whose wake job died only ends early: the saga goes on.
  const onward = saga.pivoted && spec.sleep !== null;
  e.logger.warn(
    { sagaId: saga.id, step: spec.name, reason: 'timeout_job_dead', jobId: info.id },
    spec.wait
      ? 'wait timeout job died; the wait fails'
      : `sleep wake job died; the sleep ${onward ? 'ends' : 'fails'}`,
  );
  const transition = await inSagaTrace(e.tracer, saga, `dead ${spec.name}`, () =>
    onward
      ? advanceAfter(e, tx, entry, saga, spec.index, null)
      : failStep(e, tx, entry, saga, spec.index, error),
  );
  report(e, saga, spec.name, transition);
}

const sagaOf = (def: AnySagaDefinition, data: Payload) => ({
  id: data.sagaId,
  name: def.name,
  version: def.version,
});

/** The job types one saga definition runs as: a run job per step, plus compensations and timeouts. */
export function buildEntry(e: Engine, def: AnySagaDefinition): SagaEntry {
  const entry: SagaEntry = {
    def,
    steps: def.steps,
    runJobs: [],
    compensateJobs: [],
    timeoutJobs: [],
    signals: new Map(def.steps.flatMap((s) => (s.wait ? [[s.wait.signal, s] as const] : []))),
  };
  for (const spec of def.steps) {
    const retry = jobOptions(
      spec.retry,
      spec.role === 'retriable' ? RETRIABLE_MAX_ATTEMPTS : STEP_MAX_ATTEMPTS,
      def.leaseMs,
    );
    entry.runJobs.push(
      defineJob({
        type: jobType(def, spec.name, 'run'),
        queue: def.queue,
        payload,
        ...retry,
        trace: 'continue',
        handler: (data, job) =>
          inStepSpan(e.tracer, sagaOf(def, data), 'step', spec.name, () =>
            runStep(e, entry, spec, data, job),
          ),
        onDead: (tx, info) => stepDead(e, entry, spec, tx, info),
      }) as AnyJobDefinition,
    );
    entry.compensateJobs.push(
      spec.compensate || spec.child || (spec.parallel && spec.role === 'compensatable')
        ? (defineJob({
            type: jobType(def, spec.name, 'compensate'),
            queue: def.queue,
            payload,
            ...jobOptions(spec.compensation, COMPENSATION_MAX_ATTEMPTS, def.leaseMs),
            trace: 'continue',
            handler: (data, job) =>
              inStepSpan(e.tracer, sagaOf(def, data), 'compensate', spec.name, () =>
                spec.child || spec.parallel
                  ? runChildCompensation(e, entry, spec, data, job)
                  : runCompensation(e, entry, spec, data, job),
              ),
            onDead: (tx, info) => compensationDead(spec, e, tx, info),
          }) as AnyJobDefinition)
        : null,
    );
    // A wait's timeout job, or a sleep's wake job.
    entry.timeoutJobs.push(
      spec.wait || spec.sleep
        ? (defineJob({
            type: jobType(def, spec.name, 'timeout'),
            queue: def.queue,
            payload,
            ...jobOptions({}, STEP_MAX_ATTEMPTS, def.leaseMs),
            trace: 'continue',
            handler: (data, job) =>
              inStepSpan(e.tracer, sagaOf(def, data), 'timeout', spec.name, () =>
                runTimeout(e, entry, spec, data, job),
              ),
            onDead: (tx, info) => timeoutDead(e, entry, spec, tx, info),
          }) as AnyJobDefinition)
        : null,
    );
  }
  return entry;
}
