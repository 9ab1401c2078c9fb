import {
  databaseOption,
  databaseUrl,
  jsonOption,
  parseJobId,
  parseOptions,
  positionalArgs,
} from '../args.js';
import { printJson, type Command } from '../io.js';

export const jobsRetryCommand: Command = {
  name: 'jobs retry',
  summary: 'run a dead, cancelled or retry-waiting job again now, with fresh attempts',
  usage: [
    'usage: skiplock jobs retry <id> [--json] [--database-url URL]',
    '',
    'Only dead, cancelled and failed (waiting for a retry) jobs can be retried; the job keeps',
    'its error history. Exits 1 when the job does not exist or is in another status.',
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, { ...databaseOption, ...jsonOption });
    const id = parseJobId(positionalArgs(positionals, ['<id>'])[0]!);
    const url = databaseUrl(values['database-url'], io.env);
    const { applyJobAction } = await import('../job-action.js');
    const { before, after } = await applyJobAction(url, id, {
      verb: 'retried',
      allowed: ['dead', 'cancelled', 'failed'],
      apply: (client, jobId) => client.retryJob(jobId),
    });
    if (values.json) {
      printJson(io, { id, previousStatus: before.status, status: after.status });
    } else {
      io.stdout(`job ${id} (${before.jobType}) was ${before.status}; it is pending and runs now\n`);
    }
    return 0;
  },
};
