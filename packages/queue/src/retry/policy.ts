import { NON_RETRYABLE } from '../errors.js';
import { computeBackoffMs, type BackoffOptions } from './backoff.js';

/** Why one attempt failed; recorded in the job's error history. */
export type AttemptFailureReason = 'error' | 'timeout' | 'lease_expired';

/** Why a job went dead; recorded in the job's error history and logs. */
export type DeadReason = 'max_attempts' | 'non_retryable' | 'invalid_payload' | 'unknown_type';

export type FailureDecision =
  | { kind: 'retry'; reason: AttemptFailureReason; delayMs: number }
  | { kind: 'dead'; reason: DeadReason; attemptReason: AttemptFailureReason };

export type ErrorClass = abstract new (...args: never[]) => Error;

export interface FailureInput {
  attempt: number;
  maxAttempts: number;
  reason: AttemptFailureReason;
  error: unknown;
  backoff: BackoffOptions;
  nonRetryable?: readonly ErrorClass[] | undefined;
  random?: (() => number) | undefined;
}

export function isNonRetryable(error: unknown, classes: readonly ErrorClass[] = []): boolean {
  if (typeof error === 'object' && error !== null && NON_RETRYABLE in error) return true;
  return classes.some((cls) => error instanceof cls);
}

/** Decides, without I/O, whether a failed attempt is retried (and when) or the job is dead. */
export function decideFailure(input: FailureInput): FailureDecision {
  if (input.reason === 'error' && isNonRetryable(input.error, input.nonRetryable)) {
    return { kind: 'dead', reason: 'non_retryable', attemptReason: input.reason };
  }
  if (input.attempt >= input.maxAttempts) {
    return { kind: 'dead', reason: 'max_attempts', attemptReason: input.reason };
  }
  return {
    kind: 'retry',
    reason: input.reason,
    delayMs: computeBackoffMs(input.attempt, input.backoff, input.random),
  };
}
