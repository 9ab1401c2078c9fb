/** How the dashboard asks `redact` about a saga's values; null hides them all. */
export type Show = (what: string, value: unknown) => unknown;

/**
 * A parallel branch runs as a saga of one step named `<parent>.<group>.<branch>` (saga and step
 * names hold no dots, so only a branch's name splits in three), and its stored input carries the
 * parent's: `{ sagaId, input, steps }`, the parent's input and its outputs before the group. Shown
 * under the branch's own name only, a `redact` that hid `saga:<parent>:input` or a step's output
 * on the parent's page showed both in full on the branch's, linked from it (found by an audit).
 * So a branch's values are also asked as the parent's: its input part by part, and its step's
 * output as its part of the group's output (`{ <branch>: output }`), after its own name.
 */
export function showForBranch(
  show: Show,
  saga: BranchCandidate,
  parentDef: ParentSteps | null,
): Show {
  const parts = branchParts(saga);
  if (parts === null) return show;
  const [parent, group, branch] = parts;
  return (what, value) => {
    const own = show(what, value);
    if (what === `saga:${saga.name}:input`) return asParentInput(show, parent, parentDef, own);
    if (what === `saga:${saga.name}:${branch}:output`) {
      // Only this branch's part of the group's output is at hand: a redact that reads another
      // branch's part of it may throw, and then shows nothing of it.
      try {
        const shown = show(`saga:${parent}:${group}:output`, { [branch]: own });
        return isRecord(shown) && Object.hasOwn(shown, branch) ? shown[branch] : shown;
      } catch {
        return HIDDEN;
      }
    }
    return own;
  };
}

/** `[parent, group, branch]` of a branch saga's name; null for any other saga. */
function branchParts(saga: BranchCandidate): [string, string, string] | null {
  const parts = saga.name.split('.');
  if (parts.length !== 3 || saga.parent === null || saga.parent.step !== parts[1]) return null;
  return parts as [string, string, string];
}

/** The name of a branch saga's parent (whose version it has), for its definition; else null. */
export const branchParentName = (saga: BranchCandidate): string | null =>
  branchParts(saga)?.[0] ?? null;

type BranchCandidate = { name: string; parent: { step: string } | null };

/** The parent definition's steps, to tell its waits (whose output is the signal they took). */
export type ParentSteps = { steps: readonly { name: string; wait: { signal: string } | null }[] };

const HIDDEN = '(hidden: redact failed)';

function asParentInput(
  show: Show,
  parent: string,
  parentDef: ParentSteps | null,
  value: unknown,
): unknown {
  if (!isRecord(value)) return value;
  const shown: Record<string, unknown> = { ...value };
  if (Object.hasOwn(value, 'input')) shown.input = show(`saga:${parent}:input`, value.input);
  if (isRecord(value.steps)) {
    shown.steps = Object.fromEntries(
      Object.entries(value.steps).map(([step, output]) => {
        // A wait's output is the signal it took, asked as that signal first, as on the parent's
        // page. Without the parent's definition any step may have been a wait on a signal of its
        // name (a wait's signal unless given), as that page takes it too: a wait on a signal of
        // another name is then asked as a step only.
        const signal = parentDef
          ? parentDef.steps.find((s) => s.name === step)?.wait?.signal
          : step;
        try {
          const asSignal =
            signal === undefined ? output : show(`saga:${parent}:signal:${signal}`, output);
          return [step, show(`saga:${parent}:${step}:output`, asSignal)];
        } catch {
          // A redact that cannot read a value asked as another kind (a signal) hides it.
          return [step, HIDDEN];
        }
      }),
    );
  }
  return shown;
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
