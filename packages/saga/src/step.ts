/**
 * What a step's code is given and what it declares: the context of a step and of a
 * compensation, and a step's options (its code, compensation, retry policy, pivot and
 * retriable). Apart from the definition builder, so that a branch (which wraps a step's code)
 * needs nothing of it.
 */
import type { BackoffOptions, Logger } from '@skiplock/queue';
import type pg from 'pg';

/** Outputs of the steps that ran so far, by step name. */
export type StepOutputs = Record<string, unknown>;

/** Error classes that fail a step (or compensation) for good on the first throw. */
export type ErrorClass = abstract new (...args: never[]) => Error;

interface SharedContext<I, O extends StepOutputs> {
  readonly sagaId: string;
  readonly sagaName: string;
  readonly version: number;
  /** The step this code runs for (a compensation: the step it undoes). */
  readonly step: string;
  /** The saga's input, parsed by its schema. */
  readonly input: I;
  /**
   * Recorded outputs of the steps before this one. They went through JSON (they are what the
   * database holds), so return plain JSON values from `run`.
   */
  readonly steps: Readonly<O>;
  /**
   * Stable across every attempt: `saga:<sagaId>:<step>` for a step and
   * `saga:<sagaId>:compensate:<step>` for a compensation, with `%`, `:` and characters outside
   * printable ASCII of the saga id percent-encoded (so no two sagas share a key). Pass it to
   * external APIs so a retried attempt does not repeat an effect.
   */
  readonly idempotencyKey: string;
  /** 1-based attempt of this step's (or compensation's) job. */
  readonly attempt: number;
  /** Fires on the attempt's timeout, the saga's deadline, a lost lease or worker shutdown. */
  readonly signal: AbortSignal;
  /** Bound to `sagaId`, `saga`, `step` and `attempt`. */
  readonly logger: Logger;
  /**
   * Runs `work` in the transaction that also completes this step's job and records its result,
   * so writes to the same database commit exactly once, together with the step. Call it at most
   * once per attempt; the transaction stays open until `run` returns, then commits. The step's
   * timeout, a lost lease or the worker's shutdown deadline rolls it back first, even while `work`
   * waits: this rejects with that reason and `tx` is closed.
   */
  transaction<T>(work: (tx: pg.PoolClient) => Promise<T>): Promise<T>;
}

export type StepContext<I, O extends StepOutputs> = SharedContext<I, O>;

export interface CompensationContext<I, O extends StepOutputs> extends SharedContext<I, O> {
  /** Why the saga compensates: the failed step's error, `cancelled` or the deadline. */
  readonly reason: string;
}

/** How a step's (or compensation's) job retries. */
export interface RetryPolicy {
  /** Attempts before failing for good (default 5; retriable steps default to 1000). */
  maxAttempts?: number | undefined;
  backoff?: Partial<BackoffOptions> | undefined;
  /** Per-attempt timeout; the attempt's signal fires and it fails with reason `timeout`. */
  timeoutMs?: number | undefined;
  /** Visibility timeout of the job's claim; heartbeats renew it while the code runs. */
  leaseMs?: number | undefined;
  nonRetryable?: readonly ErrorClass[] | undefined;
}

export interface StepOptions<I, O extends StepOutputs, R> extends RetryPolicy {
  run: (ctx: StepContext<I, O>, input: I) => Promise<R> | R;
  /** Undoes the step; gets the step's recorded output. Runs as its own job, with its own retries. */
  compensate?:
    | ((ctx: CompensationContext<I, O>, output: Awaited<R>) => Promise<unknown> | unknown)
    | undefined;
  /** Retry policy of the compensation's job (default 10 attempts). */
  compensation?: RetryPolicy | undefined;
  /** At most one: once it succeeds the saga can no longer compensate. */
  pivot?: boolean | undefined;
  /** After the pivot: retried until it succeeds, never triggers compensation. */
  retriable?: boolean | undefined;
}
