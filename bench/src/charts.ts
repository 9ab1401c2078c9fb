import { readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Resvg } from '@resvg/resvg-js';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import type { Measurement } from './measurement.js';
import type { BenchResults, ChartSpec, ScenarioResult } from './results.js';
import { median } from './stats.js';

interface Point {
  panel: string;
  config: string;
  x: number;
  system: string;
  median: number;
  min: number;
  max: number;
}

const pick = (m: Measurement, key: string): number | null =>
  key === 'value' ? m.value : (m.extra[key] ?? null);

/** Median and min–max of each row's repetitions, one point per (panel, config, system). */
export function chartPoints(scenario: ScenarioResult, chart: ChartSpec): Point[] {
  const points: Point[] = [];
  for (const panel of chart.panels) {
    for (const row of scenario.rows) {
      const x = chart.xValues[row.config];
      if (x === undefined || panel.omit?.includes(row.config)) continue;
      const v = row.runs
        .map((m) => pick(m, panel.key))
        .filter((x): x is number => x !== null && Number.isFinite(x));
      const mid = median(v);
      if (mid === null) continue;
      points.push({
        panel: panel.title,
        config: row.config,
        x,
        system: row.label,
        median: mid,
        min: Math.min(...v),
        max: Math.max(...v),
      });
    }
  }
  return points;
}

/** A Vega-Lite spec: one panel per figure, a line per system, whiskers for min–max. */
export function chartSpec(scenario: ScenarioResult, chart: ChartSpec): TopLevelSpec {
  const points = chartPoints(scenario, chart);
  const ticks = Object.values(chart.xValues);
  // A median of fewer runs than the others is flagged, not drawn as if it were as solid.
  const runs = scenario.rows.map((r) => r.runs.filter((m) => m.value !== null).length);
  const partial = runs.some((n) => n < Math.max(...runs));
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: {
      text: chart.title,
      ...(partial
        ? { subtitle: 'some runs failed: see the table for how many each point has' }
        : {}),
      anchor: 'start',
      fontSize: 14,
    },
    config: { font: 'DejaVu Sans', view: { stroke: null } },
    hconcat: chart.panels.map((panel) => ({
      width: 300,
      // Room at the ends of the axis for the first and last points and their labels.
      padding: { left: 10, right: 20 },
      height: 220,
      data: { values: points.filter((p) => p.panel === panel.title) },
      encoding: {
        x: {
          field: 'x',
          type: 'quantitative',
          title: chart.xTitle,
          // The axis spans the configs run, not the next "nice" power of ten.
          scale: {
            type: chart.xLog ? 'log' : 'linear',
            domain: [Math.min(...ticks), Math.max(...ticks)],
            nice: false,
            ...(chart.xLog ? {} : { zero: false }),
          },
          axis: { values: ticks, labelExpr: 'format(datum.value, "~s")' },
        },
        color: {
          field: 'system',
          type: 'nominal',
          title: null,
          legend: { orient: 'bottom', labelLimit: 0 },
        },
      },
      layer: [
        {
          mark: { type: 'rule', opacity: 0.5 },
          encoding: {
            y: { field: 'min', type: 'quantitative', title: panel.title },
            y2: { field: 'max' },
          },
        },
        {
          mark: { type: 'line', point: true },
          encoding: { y: { field: 'median', type: 'quantitative', title: panel.title } },
        },
      ],
    })),
  };
}

/** Renders every chart of every scenario to PNG in `outDir`; returns the files written. */
export async function renderCharts(
  scenarios: readonly ScenarioResult[],
  outDir: string,
): Promise<string[]> {
  const written: string[] = [];
  for (const scenario of scenarios) {
    for (const chart of scenario.charts ?? []) {
      const view = new vega.View(vega.parse(compile(chartSpec(scenario, chart)).spec), {
        renderer: 'none',
      });
      const svg = await view.toSVG(2);
      view.finalize();
      // resvg rasterises the SVG without a browser or a native canvas build; text needs a system
      // font (DejaVu Sans on Debian), and falls back to whatever sans-serif font is installed.
      const png = new Resvg(svg, {
        background: 'white',
        font: { loadSystemFonts: true, defaultFontFamily: 'DejaVu Sans' },
      })
        .render()
        .asPng();
      writeFileSync(`${outDir}/${chart.file}`, png);
      written.push(chart.file);
    }
  }
  return written;
}

/**
 * Redraws the charts of a results file next to it (after a change to how charts are drawn):
 *
 *   pnpm --filter @skiplock/bench charts [results/latest.json]
 */
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const file = process.argv[2] ?? fileURLToPath(new URL('../results/latest.json', import.meta.url));
  const results = JSON.parse(readFileSync(file, 'utf8')) as BenchResults;
  const written = await renderCharts(results.scenarios, dirname(file));
  process.stdout.write(`${written.join('\n')}\n`);
}
