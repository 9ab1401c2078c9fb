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
  saga: { name: string; parent: { step: string } | null },
): Show {
  const parts = saga.name.split('.');
  if (parts.length !== 3 || saga.parent === null || saga.parent.step !== parts[1]) return show;
  const [parent, group, branch] = parts as [string, string, string];
  return (what, value) => {
    const own = show(what, value);
    if (what === `saga:${saga.name}:input`) return asParentInput(show, parent, own);
    if (what === `saga:${saga.name}:${branch}:output`) {
      const shown = show(`saga:${parent}:${group}:output`, { [branch]: own });
      return isRecord(shown) && Object.hasOwn(shown, branch) ? shown[branch] : shown;
    }
    return own;
  };
}

function asParentInput(show: Show, parent: string, value: unknown): unknown {
  if (!isRecord(value)) return value;
  const shown: Record<string, unknown> = { ...value };
  if (Object.hasOwn(value, 'input')) shown.input = show(`saga:${parent}:input`, value.input);
  if (isRecord(value.steps)) {
    shown.steps = Object.fromEntries(
      Object.entries(value.steps).map(([step, output]) => [
        step,
        show(`saga:${parent}:${step}:output`, output),
      ]),
    );
  }
  return shown;
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
