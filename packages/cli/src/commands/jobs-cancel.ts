import { jobActionCommand } from './job-action-command.js';

export const jobsCancelCommand = jobActionCommand({
  action: 'cancel',
  summary: 'cancel a job that is not running: pending, waiting for a retry or for a slot',
  help: [
    'Only pending, retryable (waiting for a retry) and waiting (for a slot of its concurrency key)',
    'jobs can be cancelled; a running job cannot.',
    "Exits 1 when the job does not exist or is in another status, or is a saga's job",
    '(type saga:...), which moves only with its saga.',
  ],
  verb: 'cancelled',
  allowed: ['pending', 'retryable', 'waiting'],
  apply: (client, id) => client.cancelJob(id),
  outcome: () => 'it is cancelled',
});
