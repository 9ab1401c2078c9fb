import { jobStatesByKey, type Queryable } from '@skiplock/queue/engine';
import type { SagaEntry } from './engine.js';
import { timeoutKey } from './keys.js';

/**
 * Whether the wait at step `index` has already ended by its timeout or the saga's deadline, its
 * timeout job due (or run) but not yet settled: workers busy or down can leave it so for a while.
 * A signal then is stored and left to that job, which fails the wait, instead of resuming a
 * saga whose wait is over. A timeout job that finished (a wait after the pivot that an operator
 * retried waits with no timeout) or was never enqueued (no limit) ends nothing.
 */
export async function waitExpired(tx: Queryable, entry: SagaEntry, sagaId: string, index: number) {
  const timeoutJob = entry.timeoutJobs[index];
  if (!timeoutJob) return false;
  const key = timeoutKey(sagaId, entry.steps[index]!.name);
  const jobs = await jobStatesByKey(tx, [{ queue: timeoutJob.queue, key }]);
  const job = jobs.get(`${timeoutJob.queue}\0${key}`);
  if (!job || !['pending', 'retryable', 'processing'].includes(job.status)) return false;
  return job.due || job.attempts > 0;
}
