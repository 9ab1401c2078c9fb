import { jobActionCommand } from './job-action-command.js';

export const jobsCancelCommand = jobActionCommand({
  action: 'cancel',
  summary:
    'cancel a job that is not running (pending, waiting for a retry or a slot) or whose lease expired',
  help: [
    'Only pending, retryable (waiting for a retry) and waiting (for a slot of its concurrency key)',
    'jobs can be cancelled, and processing ones whose lease has expired (their worker is gone or',
    'stuck; should it still run the job, its next write finds the lease lost); a running job whose',
    'lease is kept cannot.',
    "Exits 1 when the job does not exist or is in another status, or is a saga's job",
    '(type saga:...), which moves only with its saga.',
  ],
  verb: 'cancelled',
  allowed: ['pending', 'retryable', 'waiting'],
  apply: (client, id) => client.cancelJob(id),
  outcome: () => 'it is cancelled',
});
