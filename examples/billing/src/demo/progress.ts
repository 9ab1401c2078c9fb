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

const BAR_WIDTH = 30;

function line(c: ProgressCounts): string {
  const finished = c.completed + c.compensated + c.failed;
  const pct = c.total === 0 ? 100 : Math.floor((finished / c.total) * 100);
  return (
    `${finished}/${c.total} (${pct}%) · ${c.completed} completed · ${c.compensated} compensated · ` +
    `${c.failed} failed · ${c.inFlight} in flight · ${c.workers} workers` +
    (c.note ? ` · ${c.note}` : '')
  );
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
        const finished = c.completed + c.compensated + c.failed;
        const filled = c.total === 0 ? BAR_WIDTH : Math.round((finished / c.total) * BAR_WIDTH);
        const bar = `\x1b[32m${'█'.repeat(filled)}\x1b[2m${'░'.repeat(BAR_WIDTH - filled)}\x1b[0m`;
        // Cut to the terminal's width: a wrapped line could not be redrawn in place.
        const room = Math.max(10, (stream.columns || 120) - BAR_WIDTH - 2);
        stream.write(`\r\x1b[2K${bar} ${line(c).slice(0, room)}`);
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
      const text = line(c);
      // Unchanged lines are repeated only now and then, as a sign of life.
      const due = text === lastText ? interval * 5 : interval;
      if (now() - last < due) return;
      last = now();
      lastText = text;
      pending = null;
      stream.write(`progress: ${text}\n`);
    },
    done() {
      if (pending) stream.write(`progress: ${line(pending)}\n`);
    },
  };
}
