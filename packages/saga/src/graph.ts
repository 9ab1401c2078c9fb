import type { AnySagaDefinition, StepSpec } from './define.js';

/** A Mermaid label: quoted, with the characters Mermaid would read as syntax escaped. */
function label(text: string): string {
  return `"${text.replace(/"/g, '#quot;').replace(/</g, '#lt;').replace(/>/g, '#gt;')}"`;
}

function duration(ms: number): string {
  if (ms % 86_400_000 === 0) return `${ms / 86_400_000} d`;
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`;
  if (ms % 60_000 === 0) return `${ms / 60_000} min`;
  if (ms % 1_000 === 0) return `${ms / 1_000} s`;
  return `${ms} ms`;
}

/** One step's node: its shape says what it is (a wait, the pivot, a step that only retries). */
function node(step: StepSpec): string {
  const id = `s${step.index}`;
  if (step.wait) {
    const timeout =
      step.wait.timeoutMs === null ? '' : `, timeout ${duration(step.wait.timeoutMs)}`;
    return `  ${id}[/${label(`${step.name}: wait for signal ${step.wait.signal}${timeout}`)}/]`;
  }
  if (step.role === 'pivot') return `  ${id}{{${label(`${step.name} (pivot)`)}}}`;
  if (step.role === 'retriable') return `  ${id}[${label(`${step.name} (retried until done)`)}]`;
  return `  ${id}[${label(step.name)}]`;
}

/**
 * The definition as a Mermaid flowchart: the steps in order from start to completed; from each
 * step that can fail the saga, a dashed edge to the compensations it triggers, which run in
 * reverse order of the steps down to `compensated`. Steps after the pivot retry until done and
 * have no such edge. Deterministic, so a diagram in a README can be checked against the code.
 */
export function sagaGraph(definition: AnySagaDefinition): string {
  const steps = definition.steps;
  const lines = [
    'flowchart TD',
    `  start([${label(`start ${definition.name} v${definition.version}`)}])`,
    ...steps.map(node),
    `  done([${label('completed')}])`,
  ];
  const compensatable = steps.filter((s) => s.role === 'compensatable');
  for (const s of compensatable) lines.push(`  c${s.index}[${label(`undo ${s.name}`)}]`);
  if (steps.some((s) => s.role !== 'retriable')) {
    lines.push(`  compensated([${label('compensated')}])`);
  }
  const chain = ['start', ...steps.map((s) => `s${s.index}`), 'done'];
  lines.push(`  ${chain.join(' --> ')}`);
  // The compensation that runs first when position `index` fails: the nearest earlier step with
  // a compensation, else nothing to undo.
  const undoBefore = (index: number) => {
    const earlier = compensatable.filter((s) => s.index < index);
    return earlier.length > 0 ? `c${earlier[earlier.length - 1]!.index}` : 'compensated';
  };
  for (const s of steps) {
    if (s.role === 'retriable') continue;
    const why = s.wait?.timeoutMs != null ? 'fails or times out' : 'fails';
    lines.push(`  s${s.index} -. ${why} .-> ${undoBefore(s.index)}`);
  }
  for (const s of compensatable) lines.push(`  c${s.index} --> ${undoBefore(s.index)}`);
  return `${lines.join('\n')}\n`;
}
