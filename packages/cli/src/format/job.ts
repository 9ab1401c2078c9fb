import type { Job } from '@skiplock/queue';

const iso = (d: Date | null) => (d === null ? null : d.toISOString());

/** A job for `--json` output, keys in a fixed order; listings leave out payload and errors. */
export function jobSummaryJson(job: Job) {
  return {
    id: job.id,
    queue: job.queue,
    jobType: job.jobType,
    status: job.status,
    priority: job.priority,
    attempts: job.attempts,
    maxAttempts: job.maxAttempts,
    runAt: iso(job.runAt),
    createdAt: iso(job.createdAt),
    updatedAt: iso(job.updatedAt),
    completedAt: iso(job.completedAt),
    lockedAt: iso(job.lockedAt),
    lockedBy: job.lockedBy,
    leaseExpiresAt: iso(job.leaseExpiresAt),
    leaseMs: job.leaseMs,
    timeoutMs: job.timeoutMs,
    idempotencyKey: job.idempotencyKey,
    concurrencyKey: job.concurrencyKey,
    concurrencyLimit: job.concurrencyLimit,
    singletonKey: job.singletonKey,
    lastError: job.lastError,
  };
}

export function jobJson(job: Job) {
  return {
    ...jobSummaryJson(job),
    payload: job.payload,
    errors: job.errors.map((e) => ({
      attempt: e.attempt,
      reason: e.reason,
      message: e.message,
      at: new Date(e.at).toISOString(),
    })),
  };
}

export interface TimelineEntry {
  at: string;
  event:
    | 'enqueued'
    | 'attempt_failed'
    | 'claimed'
    | 'next_run'
    | 'waits_for_slot'
    | 'completed'
    | 'dead'
    | 'cancelled';
  attempt: number | null;
  reason: string | null;
  message: string | null;
}

/**
 * A job's history in time order, from what the row keeps: creation, each failed attempt (the
 * bounded error history), the current claim or next run, and how it ended.
 */
export function jobTimeline(job: Job): TimelineEntry[] {
  const entry = (
    at: Date,
    event: TimelineEntry['event'],
    extra: Partial<Omit<TimelineEntry, 'at' | 'event'>> = {},
  ): TimelineEntry => ({
    at: at.toISOString(),
    event,
    attempt: extra.attempt ?? null,
    reason: extra.reason ?? null,
    message: extra.message ?? null,
  });
  const entries = [entry(job.createdAt, 'enqueued')];
  for (const e of job.errors) {
    entries.push(
      entry(new Date(e.at), 'attempt_failed', {
        attempt: e.attempt,
        reason: e.reason,
        message: e.message,
      }),
    );
  }
  switch (job.status) {
    case 'processing':
      if (job.lockedAt) entries.push(entry(job.lockedAt, 'claimed', { attempt: job.attempts }));
      break;
    case 'pending':
    case 'retryable':
      entries.push(entry(job.runAt, 'next_run', { attempt: job.attempts + 1 }));
      break;
    case 'waiting':
      entries.push(
        entry(job.runAt, 'waits_for_slot', {
          attempt: job.attempts + 1,
          message: `concurrency key ${job.concurrencyKey ?? '?'}, limit ${job.concurrencyLimit ?? '?'}`,
        }),
      );
      break;
    case 'completed':
      entries.push(entry(job.completedAt ?? job.updatedAt, 'completed', { attempt: job.attempts }));
      break;
    case 'dead':
      entries.push(entry(job.updatedAt, 'dead', { message: job.lastError }));
      break;
    case 'cancelled':
      entries.push(entry(job.updatedAt, 'cancelled'));
      break;
  }
  // A stable sort keeps same-instant entries in the order they happened.
  return entries.sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
}
