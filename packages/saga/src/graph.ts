import type { AnySagaDefinition, StepSpec } from './define.js';

/** What a node of a saga's shape stands for. */
export type SagaShapeNodeKind =
  | 'start'
  | 'step'
  | 'parallel'
  | 'wait'
  | 'pivot'
  | 'retriable'
  | 'compensation'
  | 'completed'
  | 'compensated';

export interface SagaShapeNode {
  /** `start`, `s<index>` (a step), `c<index>` (its compensation), `done`, `compensated`. */
  id: string;
  kind: SagaShapeNodeKind;
  label: string;
  /** The step it belongs to (a step or its compensation); null for start and the two ends. */
  step: string | null;
  /** A parallel group's branches, by name, in definition order; absent on other nodes. */
  branches?: string[];
}

export interface SagaShapeEdge {
  from: string;
  to: string;
  /** `next`: the step that follows; `fails`: where a failure for good leads; `undo`: the next compensation. */
  kind: 'next' | 'fails' | 'undo';
  /** `fails` or `fails or times out` on failure edges; null on the others. */
  label: string | null;
}

/** A saga definition as a graph: what `sagaGraph` draws, for tools that draw it themselves. */
export interface SagaShape {
  nodes: SagaShapeNode[];
  edges: SagaShapeEdge[];
}

function duration(ms: number): string {
  if (ms === 0) return '0 ms';
  if (ms % 86_400_000 === 0) return `${ms / 86_400_000} d`;
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`;
  if (ms % 60_000 === 0) return `${ms / 60_000} min`;
  if (ms % 1_000 === 0) return `${ms / 1_000} s`;
  return `${ms} ms`;
}

/** One step's node: its kind says what it is (a wait, the pivot, a step that only retries). */
function stepNode(step: StepSpec): SagaShapeNode {
  const base = { id: `s${step.index}`, step: step.name };
  if (step.wait) {
    // After the pivot a timeout cannot compensate: the saga fails, for an operator.
    const then = step.role === 'retriable' ? ' (then failed)' : '';
    const timeout =
      step.wait.timeoutMs === null ? '' : `, timeout ${duration(step.wait.timeoutMs)}${then}`;
    return {
      ...base,
      kind: 'wait',
      label: `${step.name}: wait for signal ${step.wait.signal}${timeout}`,
    };
  }
  if (step.sleep) {
    const how = step.sleep.ms !== null ? duration(step.sleep.ms) : 'until a computed time';
    return { ...base, kind: 'wait', label: `${step.name}: sleep ${how}` };
  }
  if (step.parallel) {
    const branches = step.parallel.branches.map((b) => b.name);
    return {
      ...base,
      kind: 'parallel',
      label: `${step.name}: ${branches.length} parallel branches, the last to end moves on`,
      branches,
    };
  }
  if (step.child) {
    const { name, version } = step.child.def;
    return { ...base, kind: 'step', label: `${step.name}: child saga ${name} v${version}` };
  }
  if (step.role === 'pivot') return { ...base, kind: 'pivot', label: `${step.name} (pivot)` };
  if (step.role === 'retriable') {
    return { ...base, kind: 'retriable', label: `${step.name} (retried until done)` };
  }
  return { ...base, kind: 'step', label: step.name };
}

/** The start's note on a lock key: one active saga per key, later starts queued or refused. */
function lockNote(definition: AnySagaDefinition): string {
  if (!definition.lock) return '';
  const later = definition.lock.whenLocked === 'queue' ? 'queue' : 'are refused';
  return `, one active per lock key (later starts ${later})`;
}

/**
 * The definition as nodes and edges: the steps in order from start to completed; from each step
 * that can fail the saga, a failure edge to the compensation that runs first, and from each
 * compensation to the next, in reverse order of the steps down to `compensated`. Steps after the
 * pivot retry until done and have no failure edge.
 */
export function sagaShape(definition: AnySagaDefinition): SagaShape {
  const steps = definition.steps;
  const nodes: SagaShapeNode[] = [
    {
      id: 'start',
      kind: 'start',
      label: `start ${definition.name} v${definition.version}${lockNote(definition)}`,
      step: null,
    },
    ...steps.map(stepNode),
    { id: 'done', kind: 'completed', label: 'completed', step: null },
  ];
  const compensatable = steps.filter((s) => s.role === 'compensatable');
  for (const s of compensatable) {
    // A group undoes its branches that have a compensation, all at once.
    const undone = s.parallel?.branches.filter((b) => b.def.steps[0]!.role === 'compensatable');
    const what = undone ? ` (${undone.map((b) => b.name).join(', ')} at once)` : '';
    nodes.push({
      id: `c${s.index}`,
      kind: 'compensation',
      label: `undo ${s.name}${what}`,
      step: s.name,
    });
  }
  if (steps.some((s) => s.role !== 'retriable')) {
    nodes.push({ id: 'compensated', kind: 'compensated', label: 'compensated', step: null });
  }
  const chain = ['start', ...steps.map((s) => `s${s.index}`), 'done'];
  const edges: SagaShapeEdge[] = chain
    .slice(1)
    .map((to, i) => ({ from: chain[i]!, to, kind: 'next', label: null }));
  // The compensation that runs first when position `index` fails: the nearest earlier step with
  // a compensation, else nothing to undo.
  const undoBefore = (index: number) => {
    const earlier = compensatable.filter((s) => s.index < index);
    return earlier.length > 0 ? `c${earlier[earlier.length - 1]!.index}` : 'compensated';
  };
  for (const s of steps) {
    if (s.role === 'retriable') continue;
    const label = s.wait?.timeoutMs != null ? 'fails or times out' : 'fails';
    // A failed group first undoes its own completed branches.
    const to = s.parallel && s.role === 'compensatable' ? `c${s.index}` : undoBefore(s.index);
    edges.push({ from: `s${s.index}`, to, kind: 'fails', label });
  }
  for (const s of compensatable) {
    edges.push({ from: `c${s.index}`, to: undoBefore(s.index), kind: 'undo', label: null });
  }
  return { nodes, edges };
}

/** A Mermaid label: quoted, with the characters Mermaid would read as syntax escaped. */
function label(text: string): string {
  return `"${text.replace(/"/g, '#quot;').replace(/</g, '#lt;').replace(/>/g, '#gt;')}"`;
}

function mermaidNode(node: SagaShapeNode): string {
  const text = label(node.label);
  switch (node.kind) {
    case 'parallel':
      // A subgraph of its branches, side by side; edges to the group's id reach the subgraph.
      return [
        `  subgraph ${node.id} [${text}]`,
        '    direction LR',
        ...(node.branches ?? []).map((b, i) => `    ${node.id}b${i}[${label(b)}]`),
        '  end',
      ].join('\n');
    case 'start':
    case 'completed':
    case 'compensated':
      return `  ${node.id}([${text}])`;
    case 'wait':
      return `  ${node.id}[/${text}/]`;
    case 'pivot':
      return `  ${node.id}{{${text}}}`;
    default:
      return `  ${node.id}[${text}]`;
  }
}

/**
 * The definition as a Mermaid flowchart (`sagaShape` drawn): the steps in order from start to
 * completed; from each step that can fail the saga, a dashed edge to the compensations it
 * triggers, which run in reverse order of the steps down to `compensated`. Steps after the pivot
 * retry until done and have no such edge. Deterministic, so a diagram in a README can be checked
 * against the code.
 */
export function sagaGraph(definition: AnySagaDefinition): string {
  const { nodes, edges } = sagaShape(definition);
  const chain = edges.filter((e) => e.kind === 'next');
  const lines = [
    'flowchart TD',
    ...nodes.map(mermaidNode),
    `  ${[chain[0]!.from, ...chain.map((e) => e.to)].join(' --> ')}`,
    ...edges.filter((e) => e.kind === 'fails').map((e) => `  ${e.from} -. ${e.label} .-> ${e.to}`),
    ...edges.filter((e) => e.kind === 'undo').map((e) => `  ${e.from} --> ${e.to}`),
  ];
  return `${lines.join('\n')}\n`;
}
