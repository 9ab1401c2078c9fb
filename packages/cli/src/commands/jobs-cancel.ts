import { jobActionCommand } from './job-action-command.js';

export const jobsCancelCommand = jobActionCommand({
  action: 'cancel',
  summary: 'cancel a job that is not running: pending or waiting for a retry',
  help: [
    'Only pending and retryable (waiting for a retry) jobs can be cancelled; a running job cannot.',
    'Exits 1 when the job does not exist or is in another status.',
  ],
  verb: 'cancelled',
  allowed: ['pending', 'retryable'],
  apply: (client, id) => client.cancelJob(id),
  outcome: 'it is cancelled',
});
