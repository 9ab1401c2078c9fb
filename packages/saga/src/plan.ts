/**
 * Pure saga planning: the order rules of step kinds, and which step to compensate next. No I/O,
 * so both are unit-tested directly.
 */

/**
 * The classic saga vocabulary:
 * - `compensatable` has a `compensate`; undone in reverse order when a later step fails for good
 * - `plain`         nothing to undo (a read, a validation, a wait for a signal); before the pivot
 * - `pivot`         at most one; once it succeeds the saga can no longer compensate
 * - `retriable`     after the pivot; retried until it succeeds, never triggers compensation
 */
export type StepRole = 'compensatable' | 'plain' | 'pivot' | 'retriable';

export interface PlannedStep {
  name: string;
  role: StepRole;
  /** A wait for a signal (after the pivot it takes the role `retriable`). */
  waits: boolean;
}

/**
 * Checks that `next` may follow `before`; returns why not, or null. Called as each step is added,
 * so a definition that breaks the order fails where it is written.
 */
export function orderProblem(before: readonly PlannedStep[], next: PlannedStep): string | null {
  if (before.some((s) => s.name === next.name)) {
    return `step "${next.name}" is defined twice; step names must be unique`;
  }
  const pivot = before.find((s) => s.role === 'pivot');
  const retriable = before.find((s) => s.role === 'retriable');
  if (next.role === 'pivot' && pivot) {
    return `step "${next.name}" is a second pivot; "${pivot.name}" already is the pivot and a saga has at most one`;
  }
  if (next.role === 'pivot' && retriable) {
    return `pivot "${next.name}" comes after retriable step "${retriable.name}"; retriable steps belong after the pivot`;
  }
  const barrier = pivot ?? retriable;
  if (!barrier || next.role === 'retriable') return null;
  const what =
    barrier.role === 'pivot' ? `the pivot "${barrier.name}"` : `retriable step "${barrier.name}"`;
  if (next.role === 'compensatable') {
    return `step "${next.name}" has compensate but comes after ${what}; after it the saga can no longer compensate`;
  }
  return `step "${next.name}" comes after ${what}; mark it \`retriable: true\` (steps there are retried until they succeed)`;
}

/** The role a step's options give it, or why the options contradict each other. */
export function roleOf(options: {
  name: string;
  pivot?: boolean | undefined;
  retriable?: boolean | undefined;
  hasCompensate: boolean;
}): StepRole | string {
  if (options.pivot && options.retriable) {
    return `step "${options.name}" cannot be both the pivot and retriable`;
  }
  if (options.pivot && options.hasCompensate) {
    return `step "${options.name}" is the pivot and has compensate; a pivot cannot be undone, so drop one of them`;
  }
  if (options.retriable && options.hasCompensate) {
    return `step "${options.name}" is retriable and has compensate; retriable steps never compensate`;
  }
  if (options.pivot) return 'pivot';
  if (options.retriable) return 'retriable';
  return options.hasCompensate ? 'compensatable' : 'plain';
}

/**
 * The step to compensate next: the latest completed compensatable step defined before position
 * `beforeIndex`, or null when nothing is left to undo. Compensations run strictly in reverse
 * order, so each one passes its own position as the next `beforeIndex`.
 */
export function nextCompensation(
  steps: readonly PlannedStep[],
  completed: ReadonlySet<string>,
  beforeIndex: number,
): { name: string; index: number } | null {
  for (let i = Math.min(beforeIndex, steps.length) - 1; i >= 0; i--) {
    const step = steps[i]!;
    if (step.role === 'compensatable' && completed.has(step.name))
      return { name: step.name, index: i };
  }
  return null;
}
