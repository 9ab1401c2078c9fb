/**
 * Injected failures for the demo and the tests. The demo draws transient faults at a rate; tests
 * force a failure at one named step, so each step's failure path is exercised on purpose.
 */
export type BillingStepName =
  | 'issue-invoice'
  | 'reserve-credit'
  | 'open-payment'
  | 'charge-card'
  | 'settle-payment'
  | 'issue-receipt'
  | 'write-ledger';

export class InjectedTransientError extends Error {
  readonly code = 'injected_transient';
  constructor(step: BillingStepName, attempt: number) {
    super(`injected transient failure in ${step} (attempt ${attempt})`);
    this.name = 'InjectedTransientError';
  }
}

export class InjectedPermanentError extends Error {
  readonly code = 'injected_permanent';
  constructor(step: BillingStepName) {
    super(`injected permanent failure in ${step}`);
    this.name = 'InjectedPermanentError';
  }
}

export interface Faults {
  /** Throws when a failure is due for this attempt of this step. */
  check(step: BillingStepName, attempt: number): void;
}

export interface FaultOptions {
  /** Steps that fail transiently at `transientRate` (the rest never do). */
  transientSteps?: readonly BillingStepName[];
  transientRate?: number;
  /** Fail this step: `permanent` on every attempt, or `transient` on its first `times` attempts. */
  force?:
    | { step: BillingStepName; kind: 'permanent' }
    | { step: BillingStepName; kind: 'transient'; times: number };
  random?: () => number;
}

export function createFaults(options: FaultOptions = {}): Faults {
  const random = options.random ?? Math.random;
  const rate = options.transientRate ?? 0;
  const steps = new Set(options.transientSteps ?? []);
  const force = options.force;
  return {
    check(step, attempt) {
      if (force?.step === step) {
        if (force.kind === 'permanent') throw new InjectedPermanentError(step);
        if (attempt <= force.times) throw new InjectedTransientError(step, attempt);
      }
      if (steps.has(step) && random() < rate) throw new InjectedTransientError(step, attempt);
    },
  };
}

export const noFaults: Faults = { check() {} };
