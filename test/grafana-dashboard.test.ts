import { readFile } from 'node:fs/promises';
import { createQueueMetrics } from '@skiplock/queue';
import { Histogram, Registry } from '@skiplock/queue/engine';
import { createSagaMetrics } from '@skiplock/saga';
import { describe, expect, it } from 'vitest';

interface Target {
  refId: string;
  expr: string;
  datasource?: { type: string; uid: string };
}
interface Panel {
  id: number;
  type: string;
  title: string;
  gridPos: { h: number; w: number; x: number; y: number };
  datasource?: { type: string; uid: string };
  targets?: Target[];
  panels?: Panel[];
}

const dashboard = JSON.parse(
  await readFile(new URL('../docs/grafana-skiplock.json', import.meta.url), 'utf8'),
) as {
  uid: string;
  title: string;
  schemaVersion: number;
  panels: Panel[];
  templating: { list: { name: string; type: string; query: unknown }[] };
};

/** Every panel, those inside collapsed rows too. */
const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
const graphs = panels.filter((p) => p.type !== 'row');

/** The metric a series name belongs to: a histogram's `_bucket`, `_sum`, `_count` are its own. */
function metricNames(expr: string): string[] {
  return [...expr.matchAll(/\bskiplock_[a-z_]+\b/g)].map((m) => m[0]);
}

describe('the Grafana dashboard (docs/grafana-skiplock.json)', () => {
  // What the queue and the saga runtime register: the names the panels must use.
  const registry = new Registry();
  createQueueMetrics(registry);
  createSagaMetrics(registry);
  const registered = registry
    .getMetricsAsArray()
    .map((m) => ({ name: m.name, histogram: m instanceof Histogram }));
  const known = new Map(registered.map((m) => [m.name, m.histogram]));
  const series = (name: string): string | null => {
    if (known.has(name)) return name;
    const base = name.replace(/_(bucket|sum|count)$/, '');
    return known.get(base) === true ? base : null;
  };

  it('is a dashboard Grafana imports: uid, title, schema version, unique ids, a place for each panel', () => {
    expect(dashboard).toMatchObject({ uid: 'skiplock', title: 'skiplock' });
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
    const ids = panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const p of panels) {
      expect(p.gridPos.x + p.gridPos.w, p.title).toBeLessThanOrEqual(24);
      expect(p.gridPos.h, p.title).toBeGreaterThan(0);
    }
    // No two panels overlap.
    for (const a of panels) {
      for (const b of panels) {
        if (a === b) continue;
        const apart =
          a.gridPos.x + a.gridPos.w <= b.gridPos.x ||
          b.gridPos.x + b.gridPos.w <= a.gridPos.x ||
          a.gridPos.y + a.gridPos.h <= b.gridPos.y ||
          b.gridPos.y + b.gridPos.h <= a.gridPos.y;
        expect(apart, `${a.title} / ${b.title}`).toBe(true);
      }
    }
    expect(dashboard.templating.list.map((v) => v.name)).toEqual(['datasource', 'queue']);
  });

  it('queries only metrics the queue and saga registries hold, through the chosen data source', () => {
    for (const panel of graphs) {
      expect(panel.datasource, panel.title).toEqual({ type: 'prometheus', uid: '${datasource}' });
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
      for (const target of panel.targets ?? []) {
        const names = metricNames(target.expr);
        expect(names.length, `${panel.title} ${target.refId}`).toBeGreaterThan(0);
        for (const name of names) expect(series(name), `${panel.title}: ${name}`).not.toBeNull();
        // Balanced brackets: a cheap guard against a broken expression.
        for (const [open, close] of ['()', '{}', '[]']) {
          expect(target.expr.split(open!).length, `${panel.title}: ${target.expr}`).toBe(
            target.expr.split(close!).length,
          );
        }
        // histogram_quantile needs the buckets by `le`.
        if (target.expr.includes('histogram_quantile')) {
          expect(target.expr).toMatch(/by \((le|le, [a-z_, ]+)\) \(rate\(skiplock_[a-z_]+_bucket/);
        }
      }
    }
  });

  it('has a panel for every metric', () => {
    const used = new Set(
      graphs.flatMap((p) => (p.targets ?? []).flatMap((t) => metricNames(t.expr).map(series))),
    );
    expect(registered.map((m) => m.name).filter((name) => !used.has(name))).toEqual([]);
  });
});
