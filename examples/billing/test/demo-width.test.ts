import type { SagaView } from '@skiplock/saga';
import { describe, expect, it } from 'vitest';
import { parseDemoFlags } from '../src/demo/flags.js';
import { formatHeader } from '../src/demo/header.js';
import { formatBar, formatProgressLine, type ProgressCounts } from '../src/demo/progress.js';
import type { DemoReport } from '../src/demo/report.js';
import { formatSummary, judge, type RunFacts } from '../src/demo/summary.js';
import { visibleLength } from '../src/demo/wrap.js';
import { invariants } from '../src/invariants.js';

const tooWide = (text: string, width = 80) =>
  text.split('\n').filter((line) => visibleLength(line) > width);

// A large run: 100,000 sagas, hours long, with everything the summary can mention.
const progress: ProgressCounts = {
  total: 100_000,
  completed: 88_888,
  compensated: 9_999,
  failed: 1_111,
  inFlight: 99_999,
  workers: 16,
  note: 'killed pid 4194304',
};

const at = (ms: number) => new Date(Date.UTC(2026, 0, 1) + ms);
const longError =
  'provider said: card_declined (insufficient_funds) after 3 attempts; request req_8f2e4c1b9a7d6e5f\n' +
  '    at chargeCard (examples/billing/src/steps/charge-card.ts:41:11)';
const example: SagaView = {
  id: 'inv_0123456789abcdef0123456789abcdef',
  name: 'billing.invoice',
  status: 'compensated',
  input: { customerId: 'cust_0123456789abcdef', amountCents: 24_999 },
  error: longError,
  createdAt: at(0),
  updatedAt: at(3_700_000),
  finishedAt: at(3_700_000),
  history: [
    ['step', 'reserve-credit', 'completed', 1, null],
    ['step', 'charge-card', 'failed', 12, longError],
    ['compensation', 'reserve-credit', 'completed', 3, longError],
  ].map(([kind, step, status, attempts, error], i) => ({
    kind,
    step,
    status,
    attempts,
    error,
    jobId: String(1_000_000_000 + i),
    output: null,
    createdAt: at(i * 1_000_000),
    startedAt: at(i * 1_000_000 + 5),
    finishedAt: at(i * 1_000_000 + 1_234_567),
  })),
} as unknown as SagaView;

const report: DemoReport = {
  counts: {
    total: 100_000,
    completed: 88_888,
    compensated: 9_999,
    failed: 1_000,
    cancelled: 13,
    unfinished: 100,
  },
  retries: 1_234_567,
  replayedCharges: 98_765,
  charges: { captured: 88_888, declined: 9_999, refunded: 1_234, pending: 100 },
  compensatedBy: { 'charge-card': 7_777, 'open-payment': 1_111, 'reserve-credit': 1_111 },
  voidedLate: 1_111,
  webhooks: 9_876,
  elapsedMs: 12_345_678,
  p50Ms: 1_234_567,
  p95Ms: 9_876_543,
  invariants: invariants.map((inv, i) => ({
    name: inv.name,
    rule: inv.rule,
    ok: i % 2 === 0,
    violationCount: i % 2 === 0 ? 0 : 12_345,
    sample: i % 2 === 0 ? [] : ['inv_0123456789abcdef', 'inv_fedcba9876543210', 'inv_00ff00ff00ff'],
  })),
  example,
};

const facts: RunFacts = {
  workers: 16,
  databaseSource: 'embedded-postgres',
  kills: [{ killedPid: 4_194_304, replacementPid: 4_194_303, atFinished: 33_333 }],
  unexpectedExits: 3,
  deadlineHit: true,
  workerLog: '/tmp/skiplock_demo_0123abcd.log',
  events: {
    sink: 'a local webhook receiver (no NATS server answered)',
    delivered: 299_997,
    pending: 3,
    dead: 1,
    seen: { 'invoice.issued': 100_000, 'invoice.paid': 66_666, 'invoice.voided': 33_331 },
    paidInvoices: 66_667,
    paidNotSeenOnce: ['inv_0123456789abcdef', 'inv_fedcba9876543210'],
  },
};

describe('demo output width', () => {
  it('keeps every progress line within 80 columns, bar and all', () => {
    expect(formatProgressLine(progress).length).toBeLessThanOrEqual(80);
    expect(formatProgressLine(progress)).toMatch(/^progress: 99998\/100000 \(99%\)/);
    for (const columns of [40, 80, 120, 200]) {
      const bar = formatBar(progress, columns);
      expect(visibleLength(bar), `${columns} columns`).toBeLessThan(columns);
    }
    // Where there is room, nothing is left out.
    expect(formatBar(progress, 200)).toContain('killed pid 4194304');
  });

  it('keeps every summary line within 80 columns, in colour or not', () => {
    const verdict = judge(report, facts, 100_000);
    expect(verdict.ok).toBe(false);
    for (const color of [false, true]) {
      const text = formatSummary(report, facts, verdict, { color });
      expect(tooWide(text)).toEqual([]);
      expect(text).toContain('Timeline of compensated saga');
      expect(text).toContain(facts.workerLog);
      expect(text).toContain('each of 66667 paid invoices produced exactly one');
    }
    expect(verdict.problems).toEqual(
      expect.arrayContaining([
        '3 events still waiting in the outbox',
        '1 events dead in the outbox',
        '2 paid invoices without exactly one invoice.paid seen (inv_0123456789abcdef, inv_fedcba9876543210)',
      ]),
    );
    const passing = formatSummary(
      report,
      { ...facts, workerLog: null },
      { ok: true, problems: [] },
      {
        color: false,
      },
    );
    expect(tooWide(passing)).toEqual([]);
    expect(passing).not.toContain('logs in');
  });

  it('keeps the header within 80 columns with every flag at its largest', () => {
    const flags = parseDemoFlags([
      '--count',
      '100000',
      '--workers',
      '16',
      '--decline-rate',
      '0.99',
      '--transient-rate',
      '0.9',
      '--late-confirm-rate',
      '1',
      '--kill-workers',
    ])!;
    const header = formatHeader(flags);
    expect(header[0]).toMatch(/^Billing demo: 100000 sagas on 16 worker processes/);
    expect(tooWide(header.join('\n'))).toEqual([]);
    expect(header.join(' ')).toContain('one worker killed with SIGKILL mid-run');
  });
});
