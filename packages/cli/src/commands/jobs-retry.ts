import { jobActionCommand, LOCK_WAIT_MS } from './job-action-command.js';

export const jobsRetryCommand = jobActionCommand({
  action: 'retry',
  summary: 'run a dead, cancelled or retry-waiting job again now, with fresh attempts',
  help: [
    'Only dead, cancelled, retryable (waiting for a retry) and waiting (for a slot) jobs can be',
    'retried, and processing ones whose lease has expired (their worker is gone or stuck, or an',
    'onDead hook keeps failing); the job keeps its error history. A job with a concurrency key',
    'waits for a slot of its key first. A job stopped with jobs cancel --running is retried only',
    'once its stopped run has ended. Exits 1 when the job does not exist or is in another',
    "status, or is a saga's job (type saga:...), which moves only with its saga.",
  ],
  verb: 'retried',
  allowed: ['dead', 'cancelled', 'retryable', 'waiting'],
  waitsForStoppedRun: true,
  apply: (client, id) => client.retryJob(id, { lockWaitMs: LOCK_WAIT_MS }),
  // A job with a concurrency key whose slots are all taken waits for one: "runs now" would be
  // wrong. A worker may also have taken the job already by the time it is read again.
  outcome: (after) =>
    after.status === 'pending'
      ? 'it is pending and runs now'
      : after.status === 'waiting'
        ? `it is waiting for a slot of key ${JSON.stringify(after.concurrencyKey)}, then runs`
        : `it is ${after.status} now`,
});
