import { describe, expect, it } from 'vitest';
import { inClaimOrder, type ClaimedRow } from '../src/sql/claim.js';

function row(id: string, fields: Partial<ClaimedRow> = {}): ClaimedRow {
  return {
    id,
    queue: 'q',
    job_type: 't',
    payload: {},
    attempts: 1,
    max_attempts: 3,
    priority: 0,
    timeout_ms: null,
    lease_ms: 30_000,
    idempotency_key: null,
    concurrency_key: null,
    lag_seconds: 0,
    ...fields,
  };
}

const ids = (rows: ClaimedRow[]) => rows.map((r) => r.id);

describe('inClaimOrder', () => {
  it('orders by priority desc, then the longest wait, then id as a number', () => {
    const rows = [
      row('100', { priority: 0, lag_seconds: 5 }),
      row('9', { priority: 0, lag_seconds: 5 }),
      row('10', { priority: 0, lag_seconds: 5 }),
      row('7', { priority: 0, lag_seconds: 9 }),
      row('3', { priority: 1, lag_seconds: 0 }),
    ];
    // ids are bigints as text: '9' < '10' < '100' as numbers, not as strings.
    expect(ids(inClaimOrder(rows))).toEqual(['3', '7', '9', '10', '100']);
  });

  it('puts aged rows first, oldest first, whatever their priority', () => {
    const rows = [
      row('1', { priority: 10, lag_seconds: 100, aged: false }),
      row('2', { priority: -5, lag_seconds: 50, aged: true }),
      row('3', { priority: 5, lag_seconds: 60, aged: true }),
      row('4', { priority: -5, lag_seconds: 80, aged: true }),
      row('5', { priority: 0, lag_seconds: 200, aged: false }),
    ];
    expect(ids(inClaimOrder(rows))).toEqual(['4', '3', '2', '1', '5']);
  });

  it('counts a row with no lag (admitted or handed off) as waiting for no time', () => {
    const { lag_seconds: _none, ...noLag } = row('1');
    const rows = [noLag as ClaimedRow, row('2', { lag_seconds: 1 })];
    expect(ids(inClaimOrder(rows))).toEqual(['2', '1']);
  });
});
