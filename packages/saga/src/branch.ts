import type { StandardSchemaV1 } from '@standard-schema/spec';
import type { CompensationContext, StepContext, StepOptions, StepOutputs } from './step.js';
import { invalidInput, issuesAt, validate } from './standard.js';

/**
 * A branch of a parallel group (`.parallel()`) runs as a saga of one step, a child of the saga
 * that declares it, so that it has its own job, retries, lease, compensation and history, and
 * the parent's row lock makes its join race-free. Its stored input is what its step needs from
 * the parent: the parent's id, its input as stored, and the outputs before the group.
 */
export interface BranchInput {
  sagaId: string;
  input: unknown;
  steps: StepOutputs;
}

/** A branch saga's input schema: the parent checked its parts; the branch parses them itself. */
export const branchInputSchema: StandardSchemaV1<BranchInput> = Object.freeze({
  '~standard': Object.freeze({
    version: 1 as const,
    vendor: 'skiplock',
    validate: (value: unknown) => ({ value: value as BranchInput }),
  }),
});

/** A branch saga's name: the parent's, the group's and the branch's. */
export const branchSagaName = (parent: string, group: string, branch: string) =>
  `${parent}.${group}.${branch}`;

/** A branch saga's id: the parent's, then the group's step, then the branch. */
export const branchIdOf = (parentId: string, group: string, branch: string) =>
  `${parentId}/${group}/${branch}`;

/**
 * The branch's `run` and `compensate` as its one-step saga calls them: the user's code sees the
 * parent's saga id, name, version and parsed input and the outputs before the group, as a step of
 * the parent would; the idempotency key, attempt, signal, logger and transaction are the branch's
 * own (its key `saga:<id>/<group>/<branch>:<branch>` is unique per branch).
 */
export function branchCode(
  parent: { name: string; version: number; input: StandardSchemaV1 },
  branch: string,
  options: StepOptions<unknown, StepOutputs, unknown>,
) {
  const unwrap = async <C extends StepContext<unknown, StepOutputs>>(ctx: C, stored: unknown) => {
    const data = stored as BranchInput;
    const parsed = await validate(parent.input, data.input);
    if (parsed.issues) {
      throw invalidInput(
        `branch "${branch}" of saga "${data.sagaId}": stored input no longer matches its schema`,
        issuesAt('input', parsed.issues),
      );
    }
    return {
      ...ctx,
      sagaId: data.sagaId,
      sagaName: parent.name,
      version: parent.version,
      step: branch,
      input: parsed.value,
      steps: Object.freeze({ ...data.steps }),
    };
  };
  const run = async (ctx: StepContext<unknown, StepOutputs>, stored: unknown) => {
    const own = await unwrap(ctx, stored);
    return options.run(own, own.input);
  };
  const undo = options.compensate;
  const compensate = undo
    ? async (ctx: CompensationContext<unknown, StepOutputs>, output: unknown) =>
        undo(await unwrap(ctx, ctx.input), output)
    : undefined;
  return { run, compensate };
}
