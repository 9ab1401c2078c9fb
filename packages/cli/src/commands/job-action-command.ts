import type { Client, Job, JobStatus } from '@skiplock/queue';
import {
  databaseOption,
  databaseUrl,
  jsonOption,
  parseJobId,
  parseOptions,
  positionalArgs,
} from '../args.js';
import { printJson, type Command } from '../io.js';

export interface JobActionSpec {
  /** "cancel", "retry": the subcommand of `skiplock jobs`. */
  action: string;
  summary: string;
  /** Lines of help after the usage line. */
  help: readonly string[];
  /** Verb for messages: "cancelled", "retried". */
  verb: string;
  allowed: readonly JobStatus[];
  apply(client: Client, id: string): Promise<boolean>;
  /** What the job is now, read after the action, for the human-readable line. */
  outcome(after: Job): string;
}

/** `skiplock jobs <action> <id>`: one state change that only some statuses allow. */
export function jobActionCommand(spec: JobActionSpec): Command {
  return {
    name: `jobs ${spec.action}`,
    summary: spec.summary,
    usage: [
      `usage: skiplock jobs ${spec.action} <id> [--json] [--database-url URL]`,
      '',
      ...spec.help,
    ].join('\n'),
    async run(args, io) {
      const { values, positionals } = parseOptions(args, { ...databaseOption, ...jsonOption });
      const id = parseJobId(positionalArgs(positionals, ['<id>'])[0]!);
      const url = databaseUrl(values['database-url'], io.env);
      // Loaded late so `--help` and argument errors never pay for the queue and pg modules.
      const { applyJobAction } = await import('../job-action.js');
      const { before, after } = await applyJobAction(url, id, spec);
      if (values.json) {
        printJson(io, { id, previousStatus: before.status, status: after.status });
      } else {
        io.stdout(`job ${id} (${before.jobType}) was ${before.status}; ${spec.outcome(after)}\n`);
      }
      return 0;
    },
  };
}
