import type { Throughput } from '@skiplock/queue/engine';
import { html, type Html } from './html.js';

const WIDTH = 720;
const HEIGHT = 150;
const LEFT = 44;
const BOTTOM = 22;

/** Completed and dead jobs per minute over the last hour, as stacked bars, oldest on the left. */
export function throughputChart(t: Throughput): Html {
  const minutes = t.completed.length;
  const totals = t.completed.map((c, i) => c + t.dead[i]!);
  const max = Math.max(1, ...totals);
  const plotW = WIDTH - LEFT - 8;
  const plotH = HEIGHT - BOTTOM - 8;
  const barW = plotW / minutes;
  const y = (n: number) => 8 + plotH - (n / max) * plotH;
  const bars: Html[] = [];
  for (let m = 0; m < minutes; m++) {
    // Index 0 is the current minute: drawn rightmost.
    const x = LEFT + (minutes - 1 - m) * barW + 1;
    const completed = t.completed[m]!;
    const dead = t.dead[m]!;
    const label = `${m === 0 ? 'this minute' : `${m} min ago`}: ${completed} completed, ${dead} dead`;
    bars.push(
      html`<g
        ><title>${label}</title>${
          completed > 0
            ? html`<rect
                class="bar-completed"
                x="${x.toFixed(1)}"
                y="${y(completed).toFixed(1)}"
                width="${(barW - 2).toFixed(1)}"
                height="${(y(0) - y(completed)).toFixed(1)}"
              ></rect>`
            : ''
        }${
          dead > 0
            ? html`<rect
                class="bar-dead"
                x="${x.toFixed(1)}"
                y="${y(completed + dead).toFixed(1)}"
                width="${(barW - 2).toFixed(1)}"
                height="${(y(completed) - y(completed + dead)).toFixed(1)}"
              ></rect>`
            : ''
        }</g
      >`,
    );
  }
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  return html`<figure class="chart">
    <svg
      viewBox="0 0 ${WIDTH} ${HEIGHT}"
      role="img"
      aria-label="Jobs completed and dead per minute, last hour"
    >
      <line class="axis" x1="${LEFT}" y1="${y(0)}" x2="${WIDTH - 8}" y2="${y(0)}"></line>
      <line class="gridline" x1="${LEFT}" y1="${y(max)}" x2="${WIDTH - 8}" y2="${y(max)}"></line>
      <text class="tick" x="${LEFT - 6}" y="${y(max) + 4}" text-anchor="end">${max}</text>
      <text class="tick" x="${LEFT - 6}" y="${y(0) + 4}" text-anchor="end">0</text>
      ${bars}
      <text class="tick" x="${LEFT}" y="${HEIGHT - 6}">60 min ago</text>
      <text class="tick" x="${WIDTH - 8}" y="${HEIGHT - 6}" text-anchor="end">now</text>
    </svg>
    <figcaption>
      <span class="key key-completed"></span> completed
      <strong data-testid="completed-hour">${sum(t.completed)}</strong>
      <span class="key key-dead"></span> dead <strong>${sum(t.dead)}</strong> in the last hour, per
      minute${
        t.capped
          ? html` <em
              >(the oldest minutes are undercounted: more jobs finished than the chart reads)</em
            >`
          : ''
      }
    </figcaption>
  </figure>`;
}
