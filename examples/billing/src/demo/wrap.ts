/** The width the demo writes for: a common terminal's, and what it assumes when it cannot ask. */
export const COLUMNS = 80;

// eslint-disable-next-line no-control-regex
const ANSI = /\x1b\[[0-9;]*m/g;

/** Columns `text` takes on a terminal: colour codes take none. */
export function visibleLength(text: string): number {
  return text.replace(ANSI, '').length;
}

/** Plain `text` cut to `width` columns, an ellipsis marking the cut. */
export function truncate(text: string, width: number): string {
  return text.length > width ? `${text.slice(0, Math.max(0, width - 1))}…` : text;
}

/**
 * Lines of `parts` joined by `separator` after `first` (a label such as `"  Sagas       "`), a
 * new line, indented as deep as `first`, whenever the next part would pass `width`. A part too
 * long for a line of its own is broken between words, and a word too long (a path) anywhere.
 */
export function wrapParts(
  first: string,
  parts: readonly string[],
  width: number = COLUMNS,
  separator = ' · ',
): string[] {
  const indent = ' '.repeat(visibleLength(first));
  const room = Math.max(20, width - indent.length);
  const lines: string[] = [];
  let line = '';
  const flush = () => {
    lines.push(`${lines.length === 0 ? first : indent}${line}`);
    line = '';
  };
  for (const part of parts) {
    const joined = line ? `${line}${separator}${part}` : part;
    if (visibleLength(joined) <= room) {
      line = joined;
      continue;
    }
    if (line) flush();
    for (const piece of wrapWords(part, room)) {
      if (line) flush();
      line = piece;
    }
  }
  if (line || lines.length === 0) flush();
  return lines;
}

function wrapWords(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (let word of text.split(' ')) {
    while (visibleLength(word) > width) {
      if (line) lines.push(line);
      line = '';
      lines.push(word.slice(0, width));
      word = word.slice(width);
    }
    const joined = line ? `${line} ${word}` : word;
    if (visibleLength(joined) <= width) {
      line = joined;
    } else {
      lines.push(line);
      line = word;
    }
  }
  if (line) lines.push(line);
  return lines;
}
