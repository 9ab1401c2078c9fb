/**
 * `@skiplock/saga/testing`: checks that a saga survives a failure or a crash at every step.
 *
 * For each step (wait steps excepted) it starts one saga per fault and runs them all on a real
 * worker against your database:
 * - `fail`  the step fails for good (a non-retryable error on every attempt). Before the pivot
 *           (and at it) the saga must end `compensated`, with exactly the completed steps undone
 *           in reverse order; a retriable step after the pivot instead fails twice and must then
 *           succeed, so the saga ends `completed`.
 * - `crash` the step's code runs, then its attempt dies before the completion commits (what a
 *           SIGKILL or a dropped connection does). The step must run again and the saga end
 *           `completed`: the crashed step ran twice, which its idempotency key has to absorb.
 * - `crash-compensation` the last step fails for good and the compensation of this step dies
 *           once after its code ran; the saga must still end `compensated`.
 * Every run must also skip no step: each step before the end is completed, each completed
 * compensatable step compensated. Each branch of a parallel step is a position of its own
 * (`<group>.<branch>`), faulted inside the branch's job: a failing branch's group undoes its
 * completed siblings, then the steps before it.
 */
import {
  createWorker,
  NonRetryableError,
  type AnyJobDefinition,
  type Logger,
} from '@skiplock/queue';
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { pino } from 'pino';
import type { AnySagaDefinition, SagaInput } from './define.js';
import type { FaultPoint } from './engine.js';
import { SagaError } from './errors.js';
import type { StepRecord } from './read.js';
import { createSagaRuntime } from './runtime.js';
import type { SagaStatus } from './schema.js';

export type CrashMode = 'fail' | 'crash' | 'crash-compensation';

export interface CrashCheckOptions<D extends AnySagaDefinition> {
  pool: pg.Pool;
  saga: D;
  input: SagaInput<D>;
  /** Signals delivered right after each start (before any wait step waits). */
  signals?: Record<string, unknown> | undefined;
  /** Faults to inject (default all three). */
  modes?: readonly CrashMode[] | undefined;
  /** Jobs of your own the saga needs running beside it (webhooks and the like). */
  jobs?: readonly AnyJobDefinition[] | undefined;
  /** Longest wait for all runs to end (default 60,000 ms). */
  timeoutMs?: number | undefined;
  /** Prefix of the saga ids the check starts (default `crash-check-<random>`). */
  idPrefix?: string | undefined;
  /** Throw a `SagaError` (code `crash_check_failed`) listing every bad run (default true). */
  assert?: boolean | undefined;
  logger?: Logger | undefined;
}

export interface CrashRun {
  sagaId: string;
  mode: CrashMode;
  step: string;
  expected: SagaStatus;
  status: SagaStatus | 'timed_out';
  /** How many times each step's code started, by step name. */
  runs: Record<string, number>;
  problems: string[];
  history: StepRecord[];
}

export interface CrashReport {
  ok: boolean;
  runs: CrashRun[];
}

interface Plan {
  mode: CrashMode;
  /** Where the fault goes: a step's name, or `<group>.<branch>` for a parallel branch. */
  step: string;
  /** The saga's step that fails (the branch's group, for a branch). */
  at: string;
  /** The step that fails for good in `crash-compensation`. */
  failing: string | null;
  expected: SagaStatus;
  runs: Record<string, number>;
  faulted: number;
}

const TERMINAL: ReadonlySet<string> = new Set(['completed', 'compensated', 'cancelled', 'failed']);

function plansFor(saga: AnySagaDefinition, modes: readonly CrashMode[]): Plan[] {
  const plans: Plan[] = [];
  const last = saga.steps.findLast((s) => s.role !== 'retriable' && !s.wait);
  const blank = () => ({ runs: {}, faulted: 0 });
  // Every step but waits, and each branch of a parallel step (after the group's own job).
  const positions = saga.steps
    .filter((s) => !s.wait)
    .flatMap((s) => [
      { name: s.name, at: s.name, role: s.role, index: s.index },
      ...(s.parallel?.branches ?? []).map((b) => ({
        name: `${s.name}.${b.name}`,
        at: s.name,
        role: b.def.steps[0]!.role,
        index: s.index,
      })),
    ]);
  for (const { name, at, role, index } of positions) {
    // A function: each plan counts its own runs.
    const where = () => ({ step: name, at, ...blank() });
    if (modes.includes('fail')) {
      const expected = role === 'retriable' ? 'completed' : 'compensated';
      plans.push({ mode: 'fail', failing: null, expected, ...where() });
    }
    if (modes.includes('crash')) {
      plans.push({ mode: 'crash', failing: null, expected: 'completed', ...where() });
    }
    if (
      modes.includes('crash-compensation') &&
      role === 'compensatable' &&
      last &&
      index < last.index
    ) {
      plans.push({
        mode: 'crash-compensation',
        failing: last.name,
        expected: 'compensated',
        ...where(),
      });
    }
  }
  return plans;
}

/** A branch saga's id, `<parent id>/<group>/<branch>`, split; null for any other id. */
function branchOfId(sagaId: string): { parent: string; position: string } | null {
  const match = /^(.*)\/([^/]+)\/([^/]+)$/.exec(sagaId);
  return match ? { parent: match[1]!, position: `${match[2]}.${match[3]}` } : null;
}

function inject(plan: Plan, point: FaultPoint): void {
  if (point.kind === 'step' && point.phase === 'before') {
    plan.runs[point.step] = (plan.runs[point.step] ?? 0) + 1;
  }
  const here = point.step === plan.step;
  switch (plan.mode) {
    case 'fail':
      if (!here || point.kind !== 'step' || point.phase !== 'before') return;
      if (plan.expected === 'completed') {
        // A retriable step: fail twice, then let it through.
        if (plan.faulted++ < 2) throw new Error(`injected transient failure at "${plan.step}"`);
        return;
      }
      throw new NonRetryableError(`injected failure at "${plan.step}"`);
    case 'crash':
      if (here && point.kind === 'step' && point.phase === 'after' && plan.faulted++ === 0) {
        throw new Error(`injected crash after "${plan.step}" ran`);
      }
      return;
    case 'crash-compensation':
      if (point.kind === 'step' && point.step === plan.failing && point.phase === 'before') {
        throw new NonRetryableError(`injected failure at "${plan.failing}"`);
      }
      if (
        here &&
        point.kind === 'compensation' &&
        point.phase === 'after' &&
        plan.faulted++ === 0
      ) {
        throw new Error(`injected crash after compensating "${plan.step}"`);
      }
  }
}

/** What the history must show: no step skipped, compensations exactly in reverse. */
function problemsOf(saga: AnySagaDefinition, plan: Plan, run: CrashRun): string[] {
  const problems: string[] = [];
  if (run.status !== plan.expected) {
    problems.push(`ended ${run.status}, expected ${plan.expected}`);
  }
  const steps = run.history.filter((h) => h.kind === 'step');
  const done = steps.filter((h) => h.status === 'completed').map((h) => h.step);
  const names = saga.steps.map((s) => s.name);
  if (plan.expected === 'completed' && done.join() !== names.join()) {
    problems.push(`completed steps ${done.join(', ') || 'none'}; expected ${names.join(', ')}`);
  }
  if (plan.expected === 'compensated') {
    const failedAt = plan.failing ?? plan.at;
    const before = names.slice(0, names.indexOf(failedAt));
    if (done.join() !== before.join()) {
      problems.push(
        `completed steps ${done.join(', ') || 'none'}; expected ${before.join(', ') || 'none'}`,
      );
    }
    // A step with `compensate`, or a child step (undone by compensating the child).
    const undoable = saga.steps.filter(
      (s) => s.role === 'compensatable' && before.includes(s.name),
    );
    const expectedUndo = undoable.map((s) => s.name).reverse();
    // A branch that failed: its group undoes the other branches with a compensation first.
    const inBranch = plan.failing === null && plan.step !== plan.at;
    const group = inBranch ? saga.steps.find((s) => s.name === plan.at)?.parallel : undefined;
    const undoneSibling = group?.branches.some(
      (b) => `${plan.at}.${b.name}` !== plan.step && b.def.steps[0]!.role === 'compensatable',
    );
    if (undoneSibling) expectedUndo.unshift(plan.at);
    const undone = run.history
      .filter((h) => h.kind === 'compensation' && h.status === 'completed')
      .map((h) => h.step);
    if (undone.join() !== expectedUndo.join()) {
      problems.push(
        `compensated ${undone.join(', ') || 'nothing'}; expected ${expectedUndo.join(', ') || 'nothing'}`,
      );
    }
  }
  for (const [step, count] of Object.entries(run.runs)) {
    const again = plan.mode === 'crash' && step === plan.step ? 2 : 1;
    const retried = plan.mode === 'fail' && plan.expected === 'completed' && step === plan.step;
    if (!retried && count !== again)
      problems.push(`step "${step}" ran ${count} times, expected ${again}`);
  }
  return problems;
}

/** Runs the saga with a failure or crash injected at every step; see the module comment. */
export async function checkSagaCrashes<D extends AnySagaDefinition>(
  options: CrashCheckOptions<D>,
): Promise<CrashReport> {
  const { pool, saga } = options;
  const logger = options.logger ?? pino({ level: 'silent' });
  const prefix = options.idPrefix ?? `crash-check-${randomBytes(4).toString('hex')}`;
  const plans = plansFor(saga, options.modes ?? ['fail', 'crash', 'crash-compensation']);
  const byId = new Map(plans.map((p) => [`${prefix}:${p.mode}:${p.step}`, p]));
  const runtime = createSagaRuntime({
    pool,
    sagas: [saga],
    logger,
    faults: (point) => {
      const plan = byId.get(point.sagaId);
      if (plan) return inject(plan, point);
      // A branch's own step: a position `<group>.<branch>` of its parent's plan.
      const branch = branchOfId(point.sagaId);
      const parentPlan = branch && byId.get(branch.parent);
      if (parentPlan) inject(parentPlan, { ...point, step: branch.position });
    },
  });
  const worker = createWorker({
    pool,
    jobs: [...runtime.jobs, ...(options.jobs ?? [])],
    logger,
    concurrency: 8,
    pollIntervalMs: 20,
    sweeper: false,
    retention: false,
  });
  const ids = [...byId.keys()];
  const statuses = new Map<string, SagaStatus>();
  try {
    for (const id of ids) {
      await runtime.start(saga, { id, input: options.input });
      for (const [name, payload] of Object.entries(options.signals ?? {})) {
        await runtime.signal(id, name, payload);
      }
    }
    await worker.start();
    const deadline = Date.now() + (options.timeoutMs ?? 60_000);
    while (statuses.size < ids.length && Date.now() < deadline) {
      for (const id of ids.filter((i) => !statuses.has(i))) {
        const view = await runtime.getSaga(id);
        if (view && TERMINAL.has(view.status)) statuses.set(id, view.status);
      }
      if (statuses.size < ids.length) await new Promise((r) => setTimeout(r, 25));
    }
  } finally {
    await worker.stop({ timeoutMs: 5_000 });
    await runtime.close();
  }
  const runs: CrashRun[] = [];
  for (const [id, plan] of byId) {
    const view = await runtime.getSaga(id);
    const run: CrashRun = {
      sagaId: id,
      mode: plan.mode,
      step: plan.step,
      expected: plan.expected,
      status: statuses.get(id) ?? 'timed_out',
      runs: plan.runs,
      problems: [],
      history: view?.history ?? [],
    };
    run.problems = problemsOf(saga, plan, run);
    runs.push(run);
  }
  const report = { ok: runs.every((r) => r.problems.length === 0), runs };
  if (!report.ok && options.assert !== false) {
    const lines = runs
      .filter((r) => r.problems.length > 0)
      .map((r) => `  ${r.mode} at "${r.step}" (${r.sagaId}): ${r.problems.join('; ')}`);
    throw new SagaError(
      'crash_check_failed',
      `saga "${saga.name}" did not survive every injected fault:\n${lines.join('\n')}`,
    );
  }
  return report;
}
