import { describe, expect, it } from 'vitest';
import { computeBackoffMs, NonRetryableError } from '../src/index.js';
import { decideFailure } from '../src/retry/policy.js';

const opts = { baseMs: 100, factor: 2, maxMs: 5_000, jitter: 0.5 };

describe('computeBackoffMs', () => {
  it('grows exponentially per attempt without jitter', () => {
    const noJitter = { ...opts, jitter: 0 };
    expect([1, 2, 3, 4, 5].map((a) => computeBackoffMs(a, noJitter))).toEqual([
      100, 200, 400, 800, 1600,
    ]);
  });

  it('never exceeds the cap, however many attempts', () => {
    for (const attempt of [7, 10, 50, 1_000]) {
      expect(computeBackoffMs(attempt, opts, () => 1)).toBe(5_000);
      expect(computeBackoffMs(attempt, opts, () => 0)).toBe(2_500);
    }
  });

  it('stays a number past the attempt where the growth overflows (10 ** 309)', () => {
    const zeroBase = { baseMs: 0, factor: 10, maxMs: 5_000, jitter: 0.5 };
    expect([309, 310, 1_000].map((a) => computeBackoffMs(a, zeroBase, () => 1))).toEqual([0, 0, 0]);
    const tenfold = { ...zeroBase, baseMs: 1_000 };
    expect(computeBackoffMs(1_000, tenfold, () => 1)).toBe(5_000);
  });

  it('keeps jittered delays within [d * (1 - jitter), d]', () => {
    for (let attempt = 1; attempt <= 12; attempt++) {
      const d = Math.min(opts.maxMs, opts.baseMs * 2 ** (attempt - 1));
      for (let i = 0; i < 200; i++) {
        const delay = computeBackoffMs(attempt, opts);
        expect(delay).toBeGreaterThanOrEqual(Math.floor(d * 0.5));
        expect(delay).toBeLessThanOrEqual(d);
      }
    }
  });

  it('spreads delays: jitter produces different values', () => {
    const delays = new Set(Array.from({ length: 50 }, () => computeBackoffMs(5, opts)));
    expect(delays.size).toBeGreaterThan(10);
  });
});

describe('decideFailure', () => {
  const base = { backoff: opts, random: () => 0.5, reason: 'error' as const };

  it('retries with backoff while attempts remain', () => {
    expect(decideFailure({ ...base, attempt: 2, maxAttempts: 5, error: new Error('x') })).toEqual({
      kind: 'retry',
      reason: 'error',
      delayMs: 150,
    });
  });

  it('is dead with max_attempts on the last attempt', () => {
    expect(
      decideFailure({ ...base, attempt: 5, maxAttempts: 5, error: new Error('x') }),
    ).toMatchObject({
      kind: 'dead',
      reason: 'max_attempts',
    });
  });

  it('is dead at once for NonRetryableError and listed classes', () => {
    class Declined extends Error {}
    expect(
      decideFailure({ ...base, attempt: 1, maxAttempts: 5, error: new NonRetryableError('no') }),
    ).toMatchObject({
      kind: 'dead',
      reason: 'non_retryable',
    });
    expect(
      decideFailure({
        ...base,
        attempt: 1,
        maxAttempts: 5,
        error: new Declined(),
        nonRetryable: [Declined],
      }),
    ).toMatchObject({ kind: 'dead', reason: 'non_retryable' });
  });

  it('retries a timeout like any failure, keeping the reason', () => {
    expect(
      decideFailure({ ...base, reason: 'timeout', attempt: 1, maxAttempts: 3, error: null }),
    ).toMatchObject({
      kind: 'retry',
      reason: 'timeout',
    });
  });
});
