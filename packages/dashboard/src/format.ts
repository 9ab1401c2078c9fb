import { html, type Html } from './html.js';

/** 1.2 s, 3.4 min, 2.0 h, 3.0 d: a span in the unit that reads best. */
export function formatDuration(ms: number): string {
  const abs = Math.abs(ms);
  if (abs < 1_000) return `${Math.round(ms)} ms`;
  if (abs < 60_000) return `${(ms / 1_000).toFixed(1)} s`;
  if (abs < 3_600_000) return `${(ms / 60_000).toFixed(1)} min`;
  if (abs < 86_400_000) return `${(ms / 3_600_000).toFixed(1)} h`;
  return `${(ms / 86_400_000).toFixed(1)} d`;
}

/** "3.4 min ago" or "in 20 s", with the exact time in the element's title. */
export function when(date: Date | null, now: number): Html {
  if (date === null) return html`<span class="none">–</span>`;
  const delta = now - date.getTime();
  const text =
    Math.abs(delta) < 1_000
      ? 'now'
      : delta > 0
        ? `${formatDuration(delta)} ago`
        : `in ${formatDuration(-delta)}`;
  return html`<time datetime="${date.toISOString()}" title="${date.toISOString()}">${text}</time>`;
}

const numberFormat = new Intl.NumberFormat('en-US');

/** A count; one that reached its cap reads "10,000+". */
export function count(n: number, atLeast = false): string {
  return `${numberFormat.format(n)}${atLeast ? '+' : ''}`;
}

/** Pretty JSON, cut after `maxChars` characters with a note of the full length. */
export function prettyJson(value: unknown, maxChars = 20_000): string {
  const text = JSON.stringify(value, null, 2) ?? 'null';
  return text.length > maxChars
    ? `${text.slice(0, maxChars)}\n… (${numberFormat.format(text.length)} characters in all)`
    : text;
}

/** A status word as a coloured badge. */
export function badge(status: string): Html {
  return html`<span class="badge badge-${status}">${status}</span>`;
}

/** At most `max` characters of a line of text, with the whole of it in the title. */
export function clip(text: string | null, max = 80): Html {
  if (text === null || text === '') return html`<span class="none">–</span>`;
  const line = text.replace(/\s+/g, ' ');
  return line.length <= max
    ? html`<span>${line}</span>`
    : html`<span title="${line.slice(0, 2_000)}">${line.slice(0, max - 1)}…</span>`;
}
