import type { SagaView } from '@skiplock/saga';
import type { EventReport } from './events.js';
import type { DemoReport } from './report.js';
import { COLUMNS, truncate, wrapParts } from './wrap.js';

export interface RunFacts {
  workers: number;
  databaseSource: string;
  /** Worker processes SIGKILLed mid-run, with their replacements. */
  kills: { killedPid: number; replacementPid: number; atFinished: number }[];
  /** Worker processes that died without being asked to. */
  unexpectedExits: number;
  deadlineHit: boolean;
  /** The workers' log, when it is kept (a failed run); a passing run deletes it. */
  workerLog: string | null;
  /** What the outbox relay delivered and a consumer saw; null when the run ended before. */
  events: EventReport | null;
}

export interface Verdict {
  ok: boolean;
  problems: string[];
}

/** Passes only when every saga ended completed or compensated and every invariant holds. */
export function judge(report: DemoReport, facts: RunFacts, expected: number): Verdict {
  const problems: string[] = [];
  const c = report.counts;
  if (c.total !== expected) problems.push(`${expected - c.total} sagas were never started`);
  if (c.unfinished > 0) {
    problems.push(
      `${c.unfinished} sagas still unfinished${facts.deadlineHit ? ' at the deadline' : ''}`,
    );
  }
  if (c.failed > 0) problems.push(`${c.failed} sagas failed (they need an operator)`);
  if (c.cancelled > 0) problems.push(`${c.cancelled} sagas were cancelled`);
  for (const inv of report.invariants) {
    if (!inv.ok) {
      problems.push(
        `invariant "${inv.name}" broken by ${inv.violationCount} rows (${inv.sample.join(', ')})`,
      );
    }
  }
  if (facts.unexpectedExits > 0) {
    problems.push(`${facts.unexpectedExits} worker processes died unexpectedly`);
  }
  const e = facts.events;
  if (e) {
    if (e.pending > 0) problems.push(`${e.pending} events still waiting in the outbox`);
    if (e.dead > 0) problems.push(`${e.dead} events dead in the outbox`);
    if (e.paidNotSeenOnce.length > 0) {
      problems.push(
        `${e.paidNotSeenOnce.length} paid invoices without exactly one invoice.paid seen ` +
          `(${e.paidNotSeenOnce.slice(0, 3).join(', ')})`,
      );
    }
  }
  return { ok: problems.length === 0, problems };
}

// What failing for good at a step means, in the demo's terms.
const STEP_FAILURES: Record<string, string> = {
  'charge-card': 'card declined',
};

const ms = (value: number | null) =>
  value === null
    ? 'n/a'
    : value >= 10_000
      ? `${(value / 1000).toFixed(1)} s`
      : `${Math.round(value)} ms`;

export function formatSummary(
  report: DemoReport,
  facts: RunFacts,
  verdict: Verdict,
  style: { color: boolean; width?: number },
): string {
  const width = style.width ?? COLUMNS;
  const paint = (code: string, text: string) =>
    style.color ? `\x1b[${code}m${text}\x1b[0m` : text;
  const bold = (t: string) => paint('1', t);
  const pass = paint('32', 'PASS');
  const fail = paint('31', 'FAIL');
  const c = report.counts;
  const finished = c.completed + c.compensated + c.failed + c.cancelled;
  const seconds = report.elapsedMs / 1000;
  const throughput = seconds > 0 ? (finished / seconds).toFixed(1) : 'n/a';
  const charges = Object.entries(report.charges).map(([status, n]) => `${n} ${status}`);
  const lines: string[] = [];
  // A label, then its parts wrapped under the value column.
  const field = (label: string, parts: string[], separator?: string) =>
    lines.push(...wrapParts(`  ${label.padEnd(12)}`, parts, width, separator));
  lines.push('', bold('skiplock billing demo: summary'), '');
  field('Sagas', [
    `${finished} of ${c.total} finished: ${paint('32', `${c.completed} completed`)}`,
    paint('33', `${c.compensated} compensated`),
    c.failed > 0 ? paint('31', `${c.failed} failed`) : '0 failed',
    ...(c.unfinished > 0 ? [paint('31', `${c.unfinished} unfinished`)] : []),
  ]);
  const why = Object.entries(report.compensatedBy).map(
    ([step, n]) => `${n} ${STEP_FAILURES[step] ?? `failed at ${step}`}`,
  );
  if (report.voidedLate > 0) {
    why.push(`${report.voidedLate} declined late by webhook (completed: voided after the pivot)`);
  }
  if (why.length > 0) field('Why', why);
  field('Retries', [
    `${report.retries} step retries`,
    `${report.replayedCharges} retried charges found in the provider's record`,
    'no double charge',
  ]);
  field(
    'Throughput',
    [`${throughput} sagas/s`, `(${seconds.toFixed(1)} s from first start to last finish)`],
    ' ',
  );
  field('Latency', [`p50 ${ms(report.p50Ms)}`, `p95 ${ms(report.p95Ms)} (saga start → finish)`]);
  field('Provider', [
    ...(charges.length > 0 ? charges : ['no card charges']),
    `${report.webhooks} confirmed later by webhook`,
  ]);
  field(
    'Workers',
    [
      `${facts.workers} processes on ${facts.databaseSource}`,
      ...(facts.workerLog ? [`logs in ${facts.workerLog}`] : []),
    ],
    '; ',
  );
  for (const kill of facts.kills) {
    field('Kill -9', [
      `worker pid ${kill.killedPid} SIGKILLed after ${kill.atFinished} sagas finished; ` +
        `pid ${kill.replacementPid} took its place`,
    ]);
  }
  if (facts.events) {
    const e = facts.events;
    field('Events', [
      `${e.delivered} relayed to ${e.sink}: ${e.seen['invoice.issued']} issued`,
      `${e.seen['invoice.paid']} paid`,
      `${e.seen['invoice.voided']} voided`,
    ]);
    const once = e.paidNotSeenOnce.length === 0 && e.pending === 0 && e.dead === 0;
    field('', [
      `${once ? pass : fail}  each of ${e.paidInvoices} paid invoices produced exactly one ` +
        'invoice.paid seen by a consumer',
    ]);
  }
  if (facts.kills.length > 0) {
    const allEnded = c.unfinished === 0 && c.failed === 0 && c.total > 0;
    field('', [`${allEnded ? pass : fail}  every saga still ended completed or compensated`]);
  }
  lines.push('', bold('Money invariants'));
  // The rule goes under the name: next to it, it would leave a column too narrow to read.
  for (const inv of report.invariants) {
    lines.push(`  ${inv.ok ? pass : fail}  ${inv.name}`);
    const detail = inv.ok ? inv.rule : `${inv.violationCount} violations: ${inv.sample.join(', ')}`;
    lines.push(...wrapParts('        ', [detail], width));
  }
  if (report.example) lines.push('', ...formatTimeline(report.example, bold, width));
  lines.push('');
  lines.push(
    ...(verdict.ok
      ? [`${pass}  every saga completed or compensated, and the money adds up`]
      : wrapParts(`${fail}  `, verdict.problems, width, '; ')),
  );
  return lines.join('\n') + '\n';
}

/**
 * The history of one saga as offsets from its start, steps and compensations interleaved; an
 * error goes on a line of its own under its step, cut to the width.
 */
export function formatTimeline(
  saga: SagaView,
  bold: (t: string) => string = (t) => t,
  width: number = COLUMNS,
): string[] {
  const start = saga.createdAt.getTime();
  const under = ' '.repeat(13);
  const lines = [bold(truncate(`Timeline of compensated saga ${saga.id}`, width))];
  lines.push(
    truncate(`  ${'+0 ms'.padStart(9)}  saga started (${describeInput(saga.input)})`, width),
  );
  const events = saga.history
    .map((h) => ({ h, at: (h.finishedAt ?? h.startedAt ?? h.createdAt).getTime() }))
    .sort((a, b) => a.at - b.at);
  for (const { h, at } of events) {
    const what = h.kind === 'compensation' ? `undo ${h.step}` : h.step;
    const attempts = h.attempts === 1 ? '1 attempt' : `${h.attempts} attempts`;
    lines.push(
      truncate(
        `  ${`+${ms(at - start)}`.padStart(9)}  ${what.padEnd(22)} ${h.status.padEnd(9)} ${attempts}`,
        width,
      ),
    );
    if (h.error) lines.push(`${under}${truncate(oneLine(h.error), width - under.length)}`);
  }
  const end = saga.finishedAt ? `+${ms(saga.finishedAt.getTime() - start)}` : '';
  lines.push(truncate(`  ${end.padStart(9)}  saga ${saga.status}`, width));
  if (saga.error) lines.push(`${under}${truncate(oneLine(saga.error), width - under.length)}`);
  return lines;
}

/** An error message on one line: a stack or a multi-line message would break the layout. */
function oneLine(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

function describeInput(input: unknown): string {
  const i = input as { customerId?: string; amountCents?: number };
  return `${i.customerId ?? '?'} owes $${((i.amountCents ?? 0) / 100).toFixed(2)}`;
}
