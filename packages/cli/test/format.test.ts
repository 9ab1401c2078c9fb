import type { Job } from '@skiplock/queue';
import { jobStatus } from '@skiplock/queue/engine';
import { describe, expect, it } from 'vitest';
import { jobStatuses } from '../src/commands/jobs-list.js';
import { jobTimeline } from '../src/format/job.js';
import { cell, renderTable } from '../src/format/table.js';
import { formatDuration, relativeTime } from '../src/format/time.js';
import { withoutPasswords } from '../src/io.js';

describe('formatting', () => {
  it('hides the password of every URL in a message, and nothing else', () => {
    expect(withoutPasswords('unexpected argument "postgres://ops:s3cret@db:5432/prod"')).toBe(
      'unexpected argument "postgres://ops:***@db:5432/prod"',
    );
    // An unencoded @ in the password: hidden whole (from review: its tail showed).
    expect(withoutPasswords('postgres://u:p@ss@db/x and redis://:pw@cache')).toBe(
      'postgres://u:***@db/x and redis://:***@cache',
    );
    // A port and an @ in the path or query are no password.
    for (const text of [
      'https://host:8443/cb?mail=a@b.com',
      'postgres://ops@db/prod',
      'mail ops@example.com at 10:30',
    ]) {
      expect(withoutPasswords(text)).toBe(text);
    }
  });

  it('knows every job status of the schema', () => {
    expect([...jobStatuses]).toEqual([...jobStatus.enumValues]);
  });

  it('aligns columns, numbers to the right', () => {
    const out = renderTable(
      [{ header: 'id', align: 'right' }, { header: 'name' }, { header: 'note' }],
      [
        ['7', 'short', 'x'],
        ['1234', 'a longer name', 'y'],
      ],
    );
    expect(out).toBe(
      ['  ID  NAME           NOTE', '   7  short          x', '1234  a longer name  y', ''].join(
        '\n',
      ),
    );
  });

  it('flattens and cuts user text in cells', () => {
    expect(cell('line one\n  line two', 100)).toBe('line one line two');
    expect(cell('abcdefghij', 5)).toBe('abcd…');
    expect(cell(null)).toBe('-');
  });

  it('writes ages the way a person reads them', () => {
    const now = new Date('2026-01-01T12:00:00Z');
    const ago = (ms: number) => relativeTime(new Date(now.getTime() - ms), now);
    expect(ago(400)).toBe('just now');
    expect(ago(45_000)).toBe('45s ago');
    expect(ago(3 * 60_000 + 59_000)).toBe('3m ago');
    expect(ago(2 * 3_600_000)).toBe('2h ago');
    expect(ago(3 * 86_400_000)).toBe('3d ago');
    expect(ago(-30_000)).toBe('in 30s');
    expect(relativeTime(null, now)).toBe('-');
    expect(formatDuration(59_999)).toBe('59s');
  });

  it('orders a job timeline by time and ends it with the job status', () => {
    const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s));
    const job: Job = {
      id: '9',
      queue: 'default',
      jobType: 't',
      payload: {},
      idempotencyKey: null,
      concurrencyKey: null,
      concurrencyLimit: null,
      singletonKey: null,
      status: 'dead',
      priority: 0,
      attempts: 2,
      maxAttempts: 2,
      runAt: at(0),
      lockedAt: null,
      lockedBy: null,
      leaseExpiresAt: null,
      leaseMs: 30_000,
      timeoutMs: null,
      lastError: 'second',
      errors: [
        { attempt: 2, reason: 'timeout', message: 'second', at: at(20).toISOString() },
        { attempt: 1, reason: 'error', message: 'first', at: at(10).toISOString() },
      ],
      completedAt: null,
      createdAt: at(0),
      updatedAt: at(21),
    };
    expect(jobTimeline(job).map((t) => [t.event, t.attempt, t.reason, t.message])).toEqual([
      ['enqueued', null, null, null],
      ['attempt_failed', 1, 'error', 'first'],
      ['attempt_failed', 2, 'timeout', 'second'],
      ['dead', null, null, 'second'],
    ]);
  });
});
