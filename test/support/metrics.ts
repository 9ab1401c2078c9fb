import type { Registry } from '@skiplock/queue/engine';

/**
 * The sum of a metric's samples whose labels include `labels`, read from the registry (a worker's
 * or a saga runtime's `metrics`, or a registry). A histogram's series are named as scraped:
 * `<name>_count`, `<name>_sum`, `<name>_bucket` (with `le` among the labels).
 */
export async function metricValue(
  source: Registry | { registry: Registry },
  name: string,
  labels: Record<string, string | number> = {},
): Promise<number> {
  const registry = 'registry' in source ? source.registry : source;
  const metric =
    registry.getSingleMetric(name) ??
    registry.getSingleMetric(name.replace(/_(bucket|sum|count)$/, ''));
  if (!metric) throw new Error(`no metric ${name} in the registry`);
  const family = await metric.get();
  let total = 0;
  for (const sample of family.values) {
    const sampleName = (sample as { metricName?: string }).metricName ?? family.name;
    if (sampleName !== name) continue;
    const sampleLabels = sample.labels as Record<string, string | number | undefined>;
    if (Object.entries(labels).every(([k, v]) => String(sampleLabels[k]) === String(v))) {
      total += sample.value;
    }
  }
  return total;
}
