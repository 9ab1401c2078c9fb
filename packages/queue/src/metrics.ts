/** Counters and gauges kept in process; read them with `snapshot()` or expose them for scraping. */
export class Metrics {
  private readonly counters = new Map<string, number>();
  private readonly gauges = new Map<string, number>();

  inc(name: string, by = 1): void {
    this.counters.set(name, (this.counters.get(name) ?? 0) + by);
  }

  set(name: string, value: number): void {
    this.gauges.set(name, value);
  }

  counter(name: string): number {
    return this.counters.get(name) ?? 0;
  }

  gauge(name: string): number | undefined {
    return this.gauges.get(name);
  }

  snapshot(): { counters: Record<string, number>; gauges: Record<string, number> } {
    return {
      counters: Object.fromEntries(this.counters),
      gauges: Object.fromEntries(this.gauges),
    };
  }

  /** Prometheus text exposition; names are prefixed `skiplock_`, labels kept from `name{...}`. */
  toPrometheus(): string {
    const lines: string[] = [];
    const emit = (kind: string, map: Map<string, number>) => {
      const seen = new Set<string>();
      for (const [name, value] of [...map].sort(([a], [b]) => a.localeCompare(b))) {
        const base = `skiplock_${name.split('{')[0]}`;
        if (!seen.has(base)) {
          lines.push(`# TYPE ${base} ${kind}`);
          seen.add(base);
        }
        lines.push(`skiplock_${name} ${value}`);
      }
    };
    emit('counter', this.counters);
    emit('gauge', this.gauges);
    return lines.join('\n') + '\n';
  }
}
