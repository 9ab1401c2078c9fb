import type { StandardSchemaV1 } from '@standard-schema/spec';
import { findSchemaJsonProblem, MAX_NAME_LENGTH } from '@skiplock/queue/engine';
import { z } from 'zod';
import { branchCode, branchInputSchema, branchSagaName } from './branch.js';
import { SagaDefinitionError } from './errors.js';
import { jobType } from './keys.js';
import { orderProblem, roleOf, type PlannedStep, type StepRole } from './plan.js';
import { notAStandardSchema, standardSchemaProblem } from './standard.js';
import type {
  CompensationContext,
  RetryPolicy,
  StepContext,
  StepOptions,
  StepOutputs,
} from './step.js';

type Simplify<T> = { [K in keyof T]: T[K] };

/** The outputs of a saga with no steps yet: reading any step is a compile error. */
export type NoOutputs = Record<never, never>;

/**
 * One branch of a parallel group: a step's options (its own retries, timeout and compensation).
 * Branches run before the pivot, so a branch is neither the pivot nor retriable.
 */
export type BranchOptions<I, O extends StepOutputs, R> = Omit<
  StepOptions<I, O, R>,
  'pivot' | 'retriable'
>;

declare const OUTPUT: unique symbol;
declare const OUTPUTS: unique symbol;

/** A branch as `branch()` of `.parallel()` returns it: its options, carrying its output type. */
export type Branch<I, O extends StepOutputs, R> = BranchOptions<I, O, R> & {
  readonly [OUTPUT]?: R;
};

/** The `branch` helper `.parallel()` passes: it types each branch's context and output. */
export type BranchMaker<I, O extends StepOutputs> = <R>(
  options: BranchOptions<I, O, R>,
) => Branch<I, O, R>;

/** The output type a `Branch` carries. */
type BranchOutput<B> = B extends { readonly [OUTPUT]?: infer R } ? Awaited<R> : never;

/** Most branches in one parallel group. */
export const MAX_BRANCHES = 32;

export interface WaitOptions<S extends StandardSchemaV1> {
  /** Signal name `signal(sagaId, name, payload)` delivers (default: the step's name). */
  signal?: string | undefined;
  /**
   * Validates the signal's payload (any Standard Schema v1 validator: zod 4, valibot, arktype...);
   * the step's output is the schema's output.
   */
  payload: S;
  /**
   * Counts as a failure of the step if no signal arrives in time: before the pivot the saga
   * compensates; after it the saga ends `failed` (logged at error level, reason
   * `wait_expired_after_pivot`), and `retryFailed` puts it back to waiting. 1 ms to ten years.
   */
  timeoutMs?: number | undefined;
}

/** What a sleep's wake time may depend on: the saga's input and the outputs before it. */
export interface SleepContext<I, O extends StepOutputs> {
  readonly sagaId: string;
  readonly input: I;
  readonly steps: Readonly<O>;
}

/**
 * How long a sleep lasts: milliseconds from when the saga reaches it, or a function returning the
 * moment to wake (computed once, when the saga reaches it; a moment already past wakes at once).
 */
export type SleepDuration<I, O extends StepOutputs> = number | ((ctx: SleepContext<I, O>) => Date);

/**
 * The longest sleep, wait timeout and deadline: ten years, the queue's longest delay (a wait's
 * timeout job and a sleep's wake job are delayed jobs, due at the end of the duration).
 */
export const MAX_SLEEP_MS = 10 * 365 * 86_400_000;

/** What `deadlineMs` may be, in a definition and in a start (`DEADLINE_RULE`). */
export function isDeadlineMs(value: unknown): value is number {
  return Number.isInteger(value) && (value as number) >= 1 && (value as number) <= MAX_SLEEP_MS;
}

export const DEADLINE_RULE = `deadlineMs must be an integer of ms from 1 to ${MAX_SLEEP_MS} (ten years)`;

/** Internal, untyped form of a step as the runtime executes it. */
export interface StepSpec extends PlannedStep {
  index: number;
  role: StepRole;
  run: ((ctx: StepContext<unknown, StepOutputs>, input: unknown) => unknown) | null;
  compensate: ((ctx: CompensationContext<unknown, StepOutputs>, output: unknown) => unknown) | null;
  wait: { signal: string; payload: StandardSchemaV1; timeoutMs: number | null } | null;
  /** A durable sleep: a fixed duration, or a function of the saga naming the wake time. */
  sleep: {
    ms: number | null;
    until: ((ctx: SleepContext<unknown, StepOutputs>) => Date) | null;
  } | null;
  /** A child saga: its definition and the function of the parent giving its input. */
  child: {
    def: AnySagaDefinition;
    input: (ctx: SleepContext<unknown, StepOutputs>) => unknown;
  } | null;
  /**
   * A parallel group: each branch runs as a one-step child saga of its own definition (see
   * `branch.ts`), named `<saga>.<group>.<branch>`.
   */
  parallel: { branches: readonly { name: string; def: AnySagaDefinition }[] } | null;
  retry: RetryPolicy;
  compensation: RetryPolicy;
}

export interface SagaOptions<N extends string, S extends StandardSchemaV1> {
  /** Stable name; with `version` it names the saga's job types. Letters, digits, `_` and `-`. */
  name: N;
  /** Bump it when the steps change; in-flight sagas finish on the version they started with. */
  version: number;
  /**
   * Any Standard Schema v1 validator (zod 4 from any copy of zod, valibot, arktype...): `start`
   * takes its input type, steps get its output.
   */
  input: S;
  /** Queue of the saga's jobs (default `sagas`). */
  queue?: string | undefined;
  /**
   * Default deadline of each saga, counted from its start; a start may override it. 1 ms to ten
   * years (`MAX_SLEEP_MS`, the queue's longest delay).
   */
  deadlineMs?: number | undefined;
  /**
   * The lease of the saga's jobs whose options set none: steps and compensations without their
   * own `leaseMs`, and the jobs no options reach (a wait's, a sleep's, a child's or a parallel
   * group's step, and the timeout or wake job of a wait or sleep). How long the jobs a crashed
   * worker held (running or claimed ahead) wait before another worker takes them. 1,000 ms to a
   * day; default the queue's (30 s). A child saga's own jobs take the child definition's. A job
   * carries the lease of the definition in the process that inserted it: every process that
   * starts, signals, cancels or retries sagas needs the same value as the workers.
   */
  leaseMs?: number | undefined;
  /**
   * One active saga per business key: the key of a saga's parsed input (1-200 characters; say an
   * account id). While a saga of this definition name with the key is running, waiting or
   * compensating, another start with the key queues behind it (status `queued`, started in start
   * order as each one ends: completed, compensated, cancelled or failed) or is refused with a
   * `SagaLockedError`, as `whenLocked` says. Race-free across processes: the start and the end
   * of a saga serialize on the key in PostgreSQL. A deadline counts from the start, queued time
   * included.
   */
  lockKey?: ((input: StandardSchemaV1.InferOutput<S>) => string) | undefined;
  /** What a start does while its key is held: `queue` (default) or `refuse`. */
  whenLocked?: 'queue' | 'refuse' | undefined;
}

/** A definition's lock key rule (see `SagaOptions.lockKey`). */
export interface SagaLock {
  readonly key: (input: unknown) => string;
  readonly whenLocked: 'queue' | 'refuse';
}

type StepName<K extends string, O> = K extends keyof O ? never : K;

/**
 * A saga definition. Each `.step()` returns a new definition whose later steps see this step's
 * output in `ctx.steps`, typed.
 */
export interface SagaDefinition<
  N extends string = string,
  S extends StandardSchemaV1 = StandardSchemaV1,
  O extends StepOutputs = StepOutputs,
> {
  readonly name: N;
  readonly version: number;
  readonly input: S;
  readonly queue: string;
  readonly deadlineMs: number | null;
  /** `SagaOptions.leaseMs`, or null for the queue's default. */
  readonly leaseMs: number | null;
  /** `lockKey` and `whenLocked`, or null without a lock key. */
  readonly lock: SagaLock | null;
  /** Type only: the step outputs, for `SagaOutputs`. */
  readonly [OUTPUTS]?: O;
  readonly steps: readonly StepSpec[];
  step<K extends string, R>(
    name: StepName<K, O>,
    options: StepOptions<StandardSchemaV1.InferOutput<S>, O, R>,
  ): SagaDefinition<N, S, Simplify<O & { [P in K]: Awaited<R> }>>;
  /** A step that waits for a named signal; its output is the signal's parsed payload. */
  waitFor<K extends string, P extends StandardSchemaV1>(
    name: StepName<K, O>,
    options: WaitOptions<P>,
  ): SagaDefinition<N, S, Simplify<O & { [Q in K]: StandardSchemaV1.InferOutput<P> }>>;
  /**
   * A durable sleep: the saga waits `duration` (ms, or until the Date a function of the saga
   * returns) holding no worker and no connection, across restarts. A cancel or the deadline during
   * the sleep compensates (before the pivot); after the pivot a sleep only delays. Output: null.
   */
  sleep<K extends string>(
    name: StepName<K, O>,
    duration: SleepDuration<StandardSchemaV1.InferOutput<S>, O>,
  ): SagaDefinition<N, S, Simplify<O & { [P in K]: null }>>;
  /**
   * A child saga: starts `definition` with id `<sagaId>/<name>` and the input `input` gives (a
   * function of this saga's input and earlier outputs), in this step's own transaction, and
   * waits, holding no worker, until the child ends. Completed: the step's output is the child's
   * step outputs. Compensated, cancelled or failed: the step fails and this saga compensates. A
   * later failure here compensates the completed child (its compensations, in reverse). The
   * child must be undoable (no pivot, no retriable step) and have no lock key; its deadline is at
   * most what is left of this saga's; cancelling this saga cancels it.
   */
  child<K extends string, D extends AnySagaDefinition>(
    name: StepName<K, O>,
    definition: D,
    input: (ctx: SleepContext<StandardSchemaV1.InferOutput<S>, O>) => SagaInput<D>,
  ): SagaDefinition<N, S, Simplify<O & { [P in K]: SagaOutputs<D> }>>;
  /**
   * Parallel branches: `branches` returns each branch's step options by branch name, each
   * wrapped in the `branch` it gets (which types its context and output):
   *
   * ```ts
   * .parallel('prepare', (branch) => ({
   *   stock: branch({ run: async (ctx) => reserve(ctx.input.sku), compensate: release }),
   *   card: branch({ run: async (ctx) => authorise(ctx.steps.quote.total), maxAttempts: 3 }),
   * }))
   * ```
   *
   * Each branch runs as its own job, all at the same time as far as workers have free slots, with
   * its own retries and compensation; each sees the input and the outputs before the group. The last branch to end moves the saga on, in its own ending transaction. The
   * group's output is each branch's output by branch name (`ctx.steps.<group>.<branch>`).
   *
   * When a branch fails for good (after it undid nothing, being one step), the other branches
   * are allowed to finish: a failing sibling never cuts one off. Then the completed branches
   * compensate, all at once, and when the last of them is undone the steps before the group
   * compensate in reverse. A later failure compensates the group the same way: its branches at
   * once, then what came before. A cancel or the deadline reaches every branch still running
   * (the deadline aborts a running branch's `signal` and fails its step, as it does any step's).
   */
  parallel<K extends string, B extends Record<string, object>>(
    name: StepName<K, O>,
    branches: (branch: BranchMaker<StandardSchemaV1.InferOutput<S>, O>) => B,
  ): SagaDefinition<N, S, Simplify<O & { [P in K]: { [Q in keyof B]: BranchOutput<B[Q]> } }>>;
}

// Any definition, whatever its input schema and outputs; used where definitions are collected.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnySagaDefinition = SagaDefinition<string, any, any>;

/** The input a caller passes to `start` for a definition. */
export type SagaInput<D> = D extends { readonly input: infer S extends StandardSchemaV1 }
  ? StandardSchemaV1.InferInput<S>
  : never;
/** The outputs of every step of a definition, by step name. */
export type SagaOutputs<D> = D extends { readonly [OUTPUTS]?: infer O } ? O : never;

const NAME = /^[A-Za-z0-9_-]{1,48}$/;
/** A lease's bounds, the queue's (`leaseMs` of a job). */
const MIN_LEASE_MS = 1_000;
const MAX_LEASE_MS = 86_400_000;
const retrySchema = z
  .object({
    maxAttempts: z.number().int().min(1).max(1_000).optional(),
    backoff: z
      .object({
        baseMs: z.number().int().min(0).optional(),
        factor: z.number().min(1).optional(),
        maxMs: z.number().int().min(0).optional(),
        jitter: z.number().min(0).max(1).optional(),
      })
      .strict()
      .optional(),
    timeoutMs: z.number().int().min(1).max(86_400_000).optional(),
    leaseMs: z.number().int().min(MIN_LEASE_MS).max(MAX_LEASE_MS).optional(),
    nonRetryable: z.array(z.function()).optional(),
  })
  .passthrough();

function issuesOf(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
}

function pickRetry(sagaName: string, where: string, value: unknown): RetryPolicy {
  if (value === undefined) return {};
  const parsed = retrySchema.safeParse(value);
  if (!parsed.success) {
    throw new SagaDefinitionError(sagaName, `${where}: ${issuesOf(parsed.error)}`);
  }
  const { maxAttempts, backoff, timeoutMs, leaseMs } = parsed.data;
  const nonRetryable = (value as RetryPolicy).nonRetryable;
  return { maxAttempts, backoff, timeoutMs, leaseMs, nonRetryable };
}

function lockOf(options: {
  name: string;
  lockKey?: unknown;
  whenLocked?: unknown;
}): SagaLock | null {
  const { name, lockKey, whenLocked } = options;
  if (lockKey !== undefined && typeof lockKey !== 'function') {
    throw new SagaDefinitionError(
      name,
      `lockKey must be a function of the input, got ${typeof lockKey}`,
    );
  }
  if (whenLocked !== undefined && whenLocked !== 'queue' && whenLocked !== 'refuse') {
    throw new SagaDefinitionError(
      name,
      `whenLocked must be 'queue' or 'refuse', got ${JSON.stringify(whenLocked)}`,
    );
  }
  if (lockKey === undefined) {
    if (whenLocked !== undefined) {
      throw new SagaDefinitionError(name, 'whenLocked needs a lockKey');
    }
    return null;
  }
  return Object.freeze({
    key: lockKey as (input: unknown) => string,
    whenLocked: whenLocked ?? 'queue',
  });
}

function build(
  base: Omit<SagaDefinition, 'step' | 'waitFor' | 'sleep' | 'child' | 'parallel' | 'steps'>,
  steps: readonly StepSpec[],
): AnySagaDefinition {
  const add = (spec: StepSpec): AnySagaDefinition => {
    const problem = orderProblem(steps, spec);
    if (problem) throw new SagaDefinitionError(base.name, problem);
    return build(base, Object.freeze([...steps, Object.freeze(spec)]));
  };
  const checkName = (name: unknown): string => {
    if (typeof name !== 'string' || !NAME.test(name)) {
      throw new SagaDefinitionError(
        base.name,
        `step name ${JSON.stringify(name)} must be 1-48 letters, digits, _ or -`,
      );
    }
    return name;
  };
  const definition = {
    ...base,
    steps,
    step(rawName: string, options: StepOptions<unknown, StepOutputs, unknown>) {
      const name = checkName(rawName);
      if (typeof options?.run !== 'function') {
        throw new SagaDefinitionError(base.name, `step "${name}": run must be a function`);
      }
      if (options.compensate !== undefined && typeof options.compensate !== 'function') {
        throw new SagaDefinitionError(base.name, `step "${name}": compensate must be a function`);
      }
      const role = roleOf({
        name,
        pivot: options.pivot,
        retriable: options.retriable,
        hasCompensate: options.compensate !== undefined,
      });
      if (!['compensatable', 'plain', 'pivot', 'retriable'].includes(role)) {
        throw new SagaDefinitionError(base.name, role);
      }
      return add({
        name,
        index: steps.length,
        role: role as StepRole,
        waits: false,
        run: options.run as StepSpec['run'],
        compensate: (options.compensate ?? null) as StepSpec['compensate'],
        wait: null,
        sleep: null,
        child: null,
        parallel: null,
        retry: pickRetry(base.name, `step "${name}"`, options),
        compensation: pickRetry(base.name, `step "${name}" compensation`, options.compensation),
      });
    },
    waitFor(rawName: string, options: WaitOptions<StandardSchemaV1>) {
      const name = checkName(rawName);
      const signal = options?.signal ?? name;
      if (typeof signal !== 'string' || !NAME.test(signal)) {
        throw new SagaDefinitionError(
          base.name,
          `wait step "${name}": signal name ${JSON.stringify(signal)} must be 1-48 letters, digits, _ or -`,
        );
      }
      const problem = standardSchemaProblem(options.payload);
      if (problem) {
        throw new SagaDefinitionError(
          base.name,
          `wait step "${name}": ${notAStandardSchema('payload', problem)}`,
        );
      }
      const shape = findSchemaJsonProblem(options.payload, 'payload');
      if (shape) {
        throw new SagaDefinitionError(
          base.name,
          `wait step "${name}": ${shape.path}: ${shape.message} (signal payloads are stored as JSON)`,
        );
      }
      const taken = steps.find((s) => s.wait?.signal === signal);
      if (taken) {
        throw new SagaDefinitionError(
          base.name,
          `wait step "${name}": signal "${signal}" is already awaited by step "${taken.name}"`,
        );
      }
      const timeout = options.timeoutMs;
      if (
        timeout !== undefined &&
        (!Number.isInteger(timeout) || timeout < 1 || timeout > MAX_SLEEP_MS)
      ) {
        throw new SagaDefinitionError(
          base.name,
          `wait step "${name}": timeoutMs must be an integer of ms from 1 to ${MAX_SLEEP_MS} (ten years)`,
        );
      }
      // After the pivot a wait can no longer compensate: its timeout recovers forward (the saga
      // ends `failed` for an operator, who may retry it into waiting again).
      const barrier = steps.some((s) => s.role === 'pivot' || s.role === 'retriable');
      return add({
        name,
        index: steps.length,
        role: barrier ? 'retriable' : 'plain',
        waits: true,
        run: null,
        compensate: null,
        wait: { signal, payload: options.payload, timeoutMs: timeout ?? null },
        sleep: null,
        child: null,
        parallel: null,
        retry: {},
        compensation: {},
      });
    },
    sleep(rawName: string, duration: SleepDuration<unknown, StepOutputs>) {
      const name = checkName(rawName);
      const fixed = typeof duration === 'number';
      if (
        fixed
          ? !Number.isInteger(duration) || duration < 0 || duration > MAX_SLEEP_MS
          : typeof duration !== 'function'
      ) {
        throw new SagaDefinitionError(
          base.name,
          `sleep step "${name}": the duration must be an integer of ms from 0 to ${MAX_SLEEP_MS} (ten years) or a function returning the Date to wake`,
        );
      }
      // After the pivot a sleep cannot be compensated, and needs not be: only the deadline (which
      // no longer applies there) could end it early. It takes the role of the steps around it.
      const barrier = steps.some((s) => s.role === 'pivot' || s.role === 'retriable');
      return add({
        name,
        index: steps.length,
        role: barrier ? 'retriable' : 'plain',
        waits: false,
        run: null,
        compensate: null,
        wait: null,
        sleep: fixed
          ? { ms: duration, until: null }
          : { ms: null, until: duration as NonNullable<StepSpec['sleep']>['until'] },
        child: null,
        parallel: null,
        retry: {},
        compensation: {},
      });
    },
    child(rawName: string, child: AnySagaDefinition, input: unknown) {
      const name = checkName(rawName);
      const what = `child step "${name}"`;
      if (typeof child?.name !== 'string' || !Array.isArray(child.steps)) {
        throw new SagaDefinitionError(base.name, `${what}: the child must be a saga definition`);
      }
      if (typeof input !== 'function') {
        throw new SagaDefinitionError(base.name, `${what}: input must be a function of the saga`);
      }
      if (child.name === base.name) {
        throw new SagaDefinitionError(base.name, `${what}: a saga cannot be its own child`);
      }
      if (child.steps.length === 0) {
        throw new SagaDefinitionError(base.name, `${what}: saga "${child.name}" has no steps`);
      }
      // This saga undoes a completed child by compensating it: everything in it must be undoable.
      const final = child.steps.find((s) => s.role === 'pivot' || s.role === 'retriable');
      if (final) {
        throw new SagaDefinitionError(
          base.name,
          `${what}: saga "${child.name}" has ${final.role === 'pivot' ? 'the pivot' : 'retriable step'} "${final.name}"; a child saga must be undoable (no pivot, no retriable step)`,
        );
      }
      const barrier = steps.find((s) => s.role === 'pivot' || s.role === 'retriable');
      if (barrier) {
        throw new SagaDefinitionError(
          base.name,
          `${what} comes after ${barrier.role === 'pivot' ? 'the pivot' : 'retriable step'} "${barrier.name}"; a child saga belongs before the pivot, where this saga can still undo it`,
        );
      }
      if (child.lock) {
        throw new SagaDefinitionError(
          base.name,
          `${what}: saga "${child.name}" has a lockKey; a child runs under its parent, so lock the parent instead`,
        );
      }
      return add({
        name,
        index: steps.length,
        role: 'compensatable',
        waits: false,
        run: null,
        compensate: null,
        wait: null,
        sleep: null,
        child: { def: child, input: input as NonNullable<StepSpec['child']>['input'] },
        parallel: null,
        retry: {},
        compensation: {},
      });
    },
    parallel(rawName: string, make: unknown) {
      const name = checkName(rawName);
      const what = `parallel step "${name}"`;
      const branches = (typeof make === 'function' ? make((o: unknown) => o) : undefined) as
        Record<string, StepOptions<unknown, StepOutputs, unknown>> | undefined;
      if (typeof branches !== 'object' || branches === null || Array.isArray(branches)) {
        throw new SagaDefinitionError(
          base.name,
          `${what}: branches must be a function (branch) => ({ <name>: branch({ run, ... }) }) returning the branches by name`,
        );
      }
      const names = Object.keys(branches);
      if (names.length < 2 || names.length > MAX_BRANCHES) {
        throw new SagaDefinitionError(
          base.name,
          `${what}: a group has 2 to ${MAX_BRANCHES} branches, got ${names.length}`,
        );
      }
      // Branches are undone by compensating them: the group belongs before the pivot.
      const barrier = steps.find((s) => s.role === 'pivot' || s.role === 'retriable');
      if (barrier) {
        throw new SagaDefinitionError(
          base.name,
          `${what} comes after ${barrier.role === 'pivot' ? 'the pivot' : 'retriable step'} "${barrier.name}"; parallel branches belong before the pivot, where this saga can still undo them`,
        );
      }
      const defs = names.map((branch) => {
        if (!NAME.test(branch)) {
          throw new SagaDefinitionError(
            base.name,
            `${what}: branch name ${JSON.stringify(branch)} must be 1-48 letters, digits, _ or -`,
          );
        }
        const options = branches[branch]!;
        const at = `${what}, branch "${branch}"`;
        if (typeof options?.run !== 'function') {
          throw new SagaDefinitionError(base.name, `${at}: run must be a function`);
        }
        if (options.compensate !== undefined && typeof options.compensate !== 'function') {
          throw new SagaDefinitionError(base.name, `${at}: compensate must be a function`);
        }
        if (options.pivot !== undefined || options.retriable !== undefined) {
          throw new SagaDefinitionError(
            base.name,
            `${at}: a branch is neither the pivot nor retriable (branches run before the pivot)`,
          );
        }
        const code = branchCode(base, branch, options);
        const blank = build(
          {
            name: branchSagaName(base.name, name, branch),
            version: base.version,
            input: branchInputSchema,
            queue: base.queue,
            deadlineMs: null,
            // A branch's jobs are the group's: the saga's lease where the branch sets none.
            leaseMs: base.leaseMs,
            lock: null,
          },
          Object.freeze([]),
        ) as unknown as { step(name: string, options: unknown): AnySagaDefinition };
        const def = blank.step(branch, { ...options, run: code.run, compensate: code.compensate });
        // The branch's saga name holds the group's and the saga's names, so names each within
        // their own bound can still make a job type past the queue's: said here, by name, not as
        // the queue's bare refusal when the runtime is created.
        const longest = jobType(def, branch, 'compensate');
        if (longest.length > MAX_NAME_LENGTH) {
          throw new SagaDefinitionError(
            base.name,
            `${at}: its job type ${longest} is ${longest.length} characters, over the queue's ` +
              `${MAX_NAME_LENGTH}; shorten the saga's, the group's or the branch's name`,
          );
        }
        return Object.freeze({ name: branch, def });
      });
      const undoable = defs.some((b) => b.def.steps[0]!.role === 'compensatable');
      return add({
        name,
        index: steps.length,
        role: undoable ? 'compensatable' : 'plain',
        waits: false,
        run: null,
        compensate: null,
        wait: null,
        sleep: null,
        child: null,
        parallel: { branches: Object.freeze(defs) },
        retry: {},
        compensation: {},
      });
    },
  };
  // The typed surface is the SagaDefinition interface; this object is its untyped engine.
  return Object.freeze(definition) as unknown as AnySagaDefinition;
}

/**
 * Declares a saga; add its steps in order with `.step()` and `.waitFor()`:
 *
 * ```ts
 * const order = defineSaga({ name: 'order', version: 1, input: z.object({ sku: z.string() }) })
 *   .step('reserve', { run: async (ctx, input) => ({ reservationId: 'r1' }), compensate: ... })
 *   .step('charge', { pivot: true, run: async (ctx) => ctx.steps.reserve.reservationId });
 * ```
 */
export function defineSaga<N extends string, S extends StandardSchemaV1>(
  options: SagaOptions<N, S>,
): SagaDefinition<N, S, NoOutputs> {
  const name = options?.name;
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new SagaDefinitionError(
      String(name),
      'name must be 1-48 letters, digits, _ or - (it names the saga job types)',
    );
  }
  if (!Number.isInteger(options.version) || options.version < 1 || options.version > 1_000_000) {
    throw new SagaDefinitionError(name, 'version must be an integer from 1 to 1000000');
  }
  const problem = standardSchemaProblem(options.input);
  if (problem) throw new SagaDefinitionError(name, notAStandardSchema('input', problem));
  const shape = findSchemaJsonProblem(options.input, 'input');
  if (shape) {
    throw new SagaDefinitionError(
      name,
      `${shape.path}: ${shape.message} (saga inputs are stored as JSON)`,
    );
  }
  const queue = options.queue ?? 'sagas';
  if (typeof queue !== 'string' || !/^[A-Za-z0-9_.:-]{1,128}$/.test(queue)) {
    throw new SagaDefinitionError(name, `queue ${JSON.stringify(queue)} is not a valid queue name`);
  }
  const deadlineMs = options.deadlineMs ?? null;
  if (deadlineMs !== null && !isDeadlineMs(deadlineMs)) {
    throw new SagaDefinitionError(name, DEADLINE_RULE);
  }
  const leaseMs = options.leaseMs ?? null;
  if (
    leaseMs !== null &&
    (!Number.isInteger(leaseMs) || leaseMs < MIN_LEASE_MS || leaseMs > MAX_LEASE_MS)
  ) {
    throw new SagaDefinitionError(
      name,
      `leaseMs must be an integer of ms from ${MIN_LEASE_MS} to ${MAX_LEASE_MS} (a day), got ${typeof leaseMs === 'string' ? JSON.stringify(leaseMs) : String(leaseMs)}`,
    );
  }
  return build(
    {
      name,
      version: options.version,
      input: options.input,
      queue,
      deadlineMs,
      leaseMs,
      lock: lockOf(options),
    },
    Object.freeze([]),
  ) as unknown as SagaDefinition<N, S, NoOutputs>;
}
