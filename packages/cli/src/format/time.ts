/** A duration the way a person reads it at a glance: 45s, 3m, 2h, 4d. */
export function formatDuration(ms: number): string {
  const s = Math.floor(Math.abs(ms) / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h`;
  return `${Math.floor(h / 24)}d`;
}

/** "3m ago" for the past, "in 5s" for the future, relative to `now` (the database's clock). */
export function relativeTime(at: Date | null, now: Date): string {
  if (at === null) return '-';
  const ms = now.getTime() - at.getTime();
  if (Math.abs(ms) < 1000) return 'just now';
  return ms > 0 ? `${formatDuration(ms)} ago` : `in ${formatDuration(ms)}`;
}

/** An ISO timestamp followed by its relative time, for detail views. */
export function timestamp(at: Date | null, now: Date): string {
  return at === null ? '-' : `${at.toISOString()} (${relativeTime(at, now)})`;
}
