import {
  databaseOption,
  databaseUrl,
  jsonOption,
  parseJobId,
  parseOptions,
  positionalArgs,
} from '../args.js';
import { printJson, type Command } from '../io.js';

export const jobsCancelCommand: Command = {
  name: 'jobs cancel',
  summary: 'cancel a job that is not running: pending or waiting for a retry',
  usage: [
    'usage: skiplock jobs cancel <id> [--json] [--database-url URL]',
    '',
    'Only pending and failed (waiting for a retry) jobs can be cancelled; a running job cannot.',
    'Exits 1 when the job does not exist or is in another status.',
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, { ...databaseOption, ...jsonOption });
    const id = parseJobId(positionalArgs(positionals, ['<id>'])[0]!);
    const url = databaseUrl(values['database-url'], io.env);
    const { applyJobAction } = await import('../job-action.js');
    const { before, after } = await applyJobAction(url, id, {
      verb: 'cancelled',
      allowed: ['pending', 'failed'],
      apply: (client, jobId) => client.cancelJob(jobId),
    });
    if (values.json) {
      printJson(io, { id, previousStatus: before.status, status: after.status });
    } else {
      io.stdout(`job ${id} (${before.jobType}) was ${before.status}; it is cancelled\n`);
    }
    return 0;
  },
};
