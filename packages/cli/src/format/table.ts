import { terminalSafe } from '../io.js';

export interface Column {
  header: string;
  align?: 'left' | 'right';
}

/** Renders rows as columns aligned by padding, two spaces apart, with an upper-case header. */
export function renderTable(columns: readonly Column[], rows: readonly string[][]): string {
  const widths = columns.map((c, i) =>
    Math.max(c.header.length, ...rows.map((r) => (r[i] ?? '').length)),
  );
  const line = (cells: readonly string[]) =>
    columns
      .map((c, i) => {
        const cell = cells[i] ?? '';
        return c.align === 'right' ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!);
      })
      .join('  ')
      .trimEnd();
  return [line(columns.map((c) => c.header.toUpperCase())), ...rows.map(line)].join('\n') + '\n';
}

/**
 * One line of user text for a table cell: whitespace collapsed, control characters escaped
 * before the columns are measured, cut at `max` characters.
 */
export function cell(text: string | null | undefined, max = 60): string {
  if (text === null || text === undefined || text === '') return '-';
  const flat = terminalSafe(text.replace(/\s+/g, ' ').trim());
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}
