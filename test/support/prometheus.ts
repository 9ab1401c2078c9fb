import parsePrometheusTextFormat, { type ParsedFamily } from 'parse-prometheus-text-format';

export interface Sample {
  labels: Record<string, string>;
  value: number;
}

export interface Scrape {
  /** The families as the parser reads the text served: name, HELP, TYPE. */
  families: ParsedFamily[];
  /** Every sample line named `name` (a histogram's are `<name>_bucket`, `_sum`, `_count`). */
  samples(name: string): Sample[];
  /** The sum of the samples named `name` whose labels include `labels`. */
  value(name: string, labels?: Record<string, string>): number;
}

/**
 * Parses a `/metrics` body with parse-prometheus-text-format (prom-client has no parser of its
 * own). The parser reads every line strictly and throws on one it cannot read; it also folds each
 * histogram into a single series (it keeps the last label set's buckets and drops a labeled
 * `_sum` and `_count`), so samples are read from a second parse of the same text without its
 * TYPE lines, where each sample line stands as an untyped sample with all its labels.
 */
export function parseScrape(text: string): Scrape {
  const families = parsePrometheusTextFormat(text);
  const untyped = parsePrometheusTextFormat(
    text
      .split('\n')
      .filter((line) => !line.startsWith('# TYPE '))
      .join('\n'),
  );
  const byName = new Map<string, Sample[]>();
  for (const family of untyped) {
    const list = byName.get(family.name) ?? [];
    for (const m of family.metrics) {
      list.push({ labels: m.labels ?? {}, value: Number(m.value) });
    }
    byName.set(family.name, list);
  }
  const samples = (name: string) => byName.get(name) ?? [];
  return {
    families,
    samples,
    value: (name, labels = {}) =>
      samples(name)
        .filter((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v))
        .reduce((sum, s) => sum + s.value, 0),
  };
}

/** Fetches a metrics endpoint and parses it; fails on a status other than 200. */
export async function scrape(url: string): Promise<Scrape & { contentType: string | null }> {
  const response = await fetch(url);
  if (response.status !== 200) throw new Error(`${url} answered ${response.status}`);
  return {
    ...parseScrape(await response.text()),
    contentType: response.headers.get('content-type'),
  };
}
