import type { SagaShape, SagaShapeNode, SagaStepStatus } from '@skiplock/saga';
import { html, type Html } from './html.js';

// The saga definition drawn as inline SVG from `sagaShape()` (the structure `sagaGraph()` writes
// as Mermaid): the steps down the left column, each compensation beside its step on the right,
// `compensated` at the top right. Solid arrows: the next step, and each compensation to the one
// before it; dashed: where a step's failure for good leads. On a saga's page each node is
// coloured by what that saga's history says of it.

const MAIN_X = 16;
const MAIN_W = 300;
const COMP_X = 400;
const COMP_W = 200;
const NODE_H = 40;
const ROW = 58;
const TOP = 12;

interface Placed {
  node: SagaShapeNode;
  x: number;
  y: number;
  w: number;
}

/** Where the saga is, to colour the drawing: each node id's status, and the current node. */
export interface DiagramState {
  statuses: Map<string, SagaStepStatus | 'reached'>;
  current: string | null;
}

function place(shape: SagaShape): Map<string, Placed> {
  const placed = new Map<string, Placed>();
  let row = 0;
  for (const node of shape.nodes) {
    if (node.kind === 'compensation' || node.kind === 'compensated') continue;
    placed.set(node.id, { node, x: MAIN_X, y: TOP + row * ROW, w: MAIN_W });
    row++;
  }
  for (const node of shape.nodes) {
    if (node.kind === 'compensated') {
      placed.set(node.id, { node, x: COMP_X, y: TOP, w: COMP_W });
    } else if (node.kind === 'compensation') {
      const stepRow = placed.get(`s${node.id.slice(1)}`)!;
      placed.set(node.id, { node, x: COMP_X, y: stepRow.y, w: COMP_W });
    }
  }
  return placed;
}

function shapeOf(p: Placed): Html {
  const { x, y, w } = p;
  const h = NODE_H;
  switch (p.node.kind) {
    case 'start':
    case 'completed':
    case 'compensated':
      return html`<rect x="${x}" y="${y}" width="${w}" height="${h}" rx="${h / 2}"></rect>`;
    case 'wait':
      return html`<polygon
        points="${x + 12},${y} ${x + w},${y} ${x + w - 12},${y + h} ${x},${y + h}"
      ></polygon>`;
    case 'pivot':
      return html`<polygon
        points="${x + 14},${y} ${x + w - 14},${y} ${x + w},${y + h / 2} ${x + w - 14},${y + h} ${x + 14},${y + h} ${x},${y + h / 2}"
      ></polygon>`;
    default:
      return html`<rect x="${x}" y="${y}" width="${w}" height="${h}" rx="4"></rect>`;
  }
}

function clipText(text: string, chars: number): string {
  return text.length <= chars ? text : `${text.slice(0, chars - 1)}…`;
}

function labelOf(p: Placed): Html {
  const cx = p.x + p.w / 2;
  const chars = Math.floor((p.w - 24) / 7);
  const colon = p.node.kind === 'wait' ? p.node.label.indexOf(': ') : -1;
  if (colon > 0) {
    return html`<text x="${cx}" y="${p.y + 16}" text-anchor="middle"
        >${clipText(p.node.label.slice(0, colon), chars)}</text
      >
      <text class="sub" x="${cx}" y="${p.y + 31}" text-anchor="middle"
        >${clipText(p.node.label.slice(colon + 2), chars + 6)}</text
      >`;
  }
  return html`<text x="${cx}" y="${p.y + NODE_H / 2 + 4}" text-anchor="middle"
    >${clipText(p.node.label, chars)}</text
  >`;
}

export function sagaDiagram(shape: SagaShape, state: DiagramState | null = null): Html {
  const placed = place(shape);
  const all = [...placed.values()];
  const width = COMP_X + COMP_W + 16;
  const height = Math.max(...all.map((p) => p.y)) + NODE_H + TOP;
  const edges = shape.edges.map((e) => {
    const a = placed.get(e.from)!;
    const b = placed.get(e.to)!;
    if (e.kind === 'next') {
      const x = a.x + a.w / 2;
      return html`<line
        class="edge"
        x1="${x}"
        y1="${a.y + NODE_H}"
        x2="${x}"
        y2="${b.y - 2}"
        marker-end="url(#arrow)"
      ></line>`;
    }
    if (e.kind === 'undo') {
      const x = a.x + a.w / 2;
      return html`<line
        class="edge undo"
        x1="${x}"
        y1="${a.y}"
        x2="${x}"
        y2="${b.y + NODE_H + 2}"
        marker-end="url(#arrow)"
      ></line>`;
    }
    const x1 = a.x + a.w;
    const y1 = a.y + NODE_H / 2;
    const x2 = b.x - 2;
    const y2 = b.y + NODE_H / 2 + (b.node.kind === 'compensated' ? 0 : 6);
    const mid = (x1 + x2) / 2;
    return html`<path
      class="edge fails"
      d="M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}"
      marker-end="url(#arrow-fails)"
      ><title>${a.node.step ?? ''} ${e.label ?? ''}</title></path
    >`;
  });
  const nodes = all.map((p) => {
    const status = state?.statuses.get(p.node.id);
    const classes = [
      'node',
      `node-${p.node.kind}`,
      status ? `is-${status}` : '',
      state?.current === p.node.id ? 'is-current' : '',
    ]
      .filter(Boolean)
      .join(' ');
    return html`<g
      class="${classes}"
      data-node="${p.node.id}"
      ${status ? html` data-status="${status}"` : ''}
      ><title>${p.node.label}${status ? ` (${status})` : ''}</title>${shapeOf(p)}${labelOf(p)}</g
    >`;
  });
  return html`<svg
    class="diagram"
    viewBox="0 0 ${width} ${height}"
    width="${width}"
    role="img"
    aria-label="saga definition"
    data-testid="saga-diagram"
  >
    <defs>
      <marker
        id="arrow"
        viewBox="0 0 10 10"
        refX="9"
        refY="5"
        markerWidth="7"
        markerHeight="7"
        orient="auto-start-reverse"
      >
        <path d="M0,0 L10,5 L0,10 z" class="arrowhead"></path>
      </marker>
      <marker
        id="arrow-fails"
        viewBox="0 0 10 10"
        refX="9"
        refY="5"
        markerWidth="7"
        markerHeight="7"
        orient="auto-start-reverse"
      >
        <path d="M0,0 L10,5 L0,10 z" class="arrowhead fails"></path>
      </marker>
    </defs>
    ${edges} ${nodes}
  </svg>`;
}
