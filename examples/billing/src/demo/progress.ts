import { COLUMNS, truncate } from './wrap.js';

/** Counts the progress display shows; read from the database on each tick. */
export interface ProgressCounts {
  total: number;
  completed: number;
  compensated: number;
  failed: number;
  /** Running, waiting or compensating. */
  inFlight: number;
  workers: number;
  note?: string;
}

export interface ProgressDisplay {
  update(counts: ProgressCounts): void;
  /** Leaves the display on a line of its own, ready for the summary. */
  done(): void;
}

const PREFIX = 'progress: ';
const MIN_BAR = 10;
const MAX_BAR = 30;

/**
 * The counts as one line of at most `width` columns. The least telling parts go first when it is
 * too long (the note, the worker count, the jobs in flight), and only then is the line cut.
 */
export function formatProgress(c: ProgressCounts, width: number): string {
  const finished = c.completed + c.compensated + c.failed;
  const pct = c.total === 0 ? 100 : Math.floor((finished / c.total) * 100);
  const parts = [
    `${finished}/${c.total} (${pct}%)`,
    `${c.completed} completed`,
    `${c.compensated} compensated`,
    `${c.failed} failed`,
    `${c.inFlight} in flight`,
    `${c.workers} workers`,
    ...(c.note ? [c.note] : []),
  ];
  const essential = 4;
  let text = parts.join(' · ');
  while (text.length > width && parts.length > essential) {
    parts.pop();
    text = parts.join(' · ');
  }
  return truncate(text, width);
}

/** A line for a log that is not a terminal: `progress: ...`, within `COLUMNS`. */
export function formatProgressLine(c: ProgressCounts): string {
  return `${PREFIX}${formatProgress(c, COLUMNS - PREFIX.length)}`;
}

/**
 * The bar and the counts for a terminal `columns` wide, one column short of it: a line that
 * fills the last column wraps on some terminals, and could not be redrawn in place.
 */
export function formatBar(c: ProgressCounts, columns: number): string {
  const room = Math.max(MIN_BAR + 1 + 20, columns - 1);
  const full = formatProgress(c, Infinity);
  const barWidth = Math.min(MAX_BAR, Math.max(MIN_BAR, room - 1 - full.length));
  const finished = c.completed + c.compensated + c.failed;
  const filled =
    c.total === 0 ? barWidth : Math.min(barWidth, Math.round((finished / c.total) * barWidth));
  const bar = `\x1b[32m${'█'.repeat(filled)}\x1b[2m${'░'.repeat(barWidth - filled)}\x1b[0m`;
  return `${bar} ${formatProgress(c, room - 1 - barWidth)}`;
}

/**
 * On a terminal: one bar redrawn in place with plain ANSI. Elsewhere (CI logs, pipes): a line at
 * most every `intervalMs`, and one when the run ends, so logs stay short.
 */
export function createProgress(
  stream: NodeJS.WriteStream,
  options: { intervalMs?: number; now?: () => number } = {},
): ProgressDisplay {
  const now = options.now ?? Date.now;
  const interval = options.intervalMs ?? 2_000;
  if (stream.isTTY) {
    let drawn = false;
    return {
      update(c) {
        // Sized on every redraw: the terminal may have been resized since the last.
        stream.write(`\r\x1b[2K${formatBar(c, stream.columns || COLUMNS)}`);
        drawn = true;
      },
      done() {
        if (drawn) stream.write('\n');
      },
    };
  }
  let last = -Infinity;
  let lastText = '';
  let pending: ProgressCounts | null = null;
  return {
    update(c) {
      pending = c;
      const text = formatProgressLine(c);
      // Unchanged lines are repeated only now and then, as a sign of life.
      const due = text === lastText ? interval * 5 : interval;
      if (now() - last < due) return;
      last = now();
      lastText = text;
      pending = null;
      stream.write(`${text}\n`);
    },
    done() {
      if (pending) stream.write(`${formatProgressLine(pending)}\n`);
    },
  };
}
