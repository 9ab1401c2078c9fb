import { jobActionCommand, LOCK_WAIT_MS } from './job-action-command.js';

export const jobsCancelCommand = jobActionCommand({
  action: 'cancel',
  summary:
    'cancel a job that is not running (pending, waiting for a retry or a slot) or whose lease expired',
  help: [
    'Only pending, retryable (waiting for a retry) and waiting (for a slot of its concurrency key)',
    'jobs can be cancelled, and processing ones whose lease has expired (their worker is gone or',
    'stuck; should it still run the job, its next write finds the lease lost). With --running, a',
    'running job too: its worker aborts the handler and writes nothing for it, at once when it',
    "listens (LISTEN/NOTIFY), else at its next lease renewal (within a third of the job's lease).",
    'The stopped run keeps its lease, and its concurrency slot, until its handler returns or the',
    'lease runs out; the job can be retried once the run has ended.',
    "Exits 1 when the job does not exist or is in another status, or is a saga's job",
    '(type saga:...), which moves only with its saga.',
  ],
  verb: 'cancelled',
  allowed: ['pending', 'retryable', 'waiting'],
  flag: 'running',
  runningHint: 'to stop a running job, add --running',
  apply: (client, id, running) => client.cancelJob(id, { running, lockWaitMs: LOCK_WAIT_MS }),
  outcome: () => 'it is cancelled',
});
