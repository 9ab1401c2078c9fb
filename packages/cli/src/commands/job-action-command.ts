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

/**
 * How long `jobs cancel` and `jobs retry` wait for a job row another transaction holds (a job
 * stuck inside its `completeWith`), and `sagas cancel|retry|signal` each time they wait for a
 * saga's row or lock key: they hung with no bound (found by an audit). Set per statement or per
 * transaction (`lockWaitMs`), not as a connection setting: PgBouncer refuses a `lock_timeout`
 * startup parameter (found in review).
 */
export const LOCK_WAIT_MS = 5_000;

export interface JobActionSpec {
  /** "cancel", "retry": the subcommand of `skiplock jobs`. */
  action: string;
  summary: string;
  /** Lines of help after the usage line. */
  help: readonly string[];
  /** Verb for messages: "cancelled", "retried". */
  verb: string;
  allowed: readonly JobStatus[];
  /** A boolean flag of the command (`running` for `--running`), given to `apply`. */
  flag?: string;
  /** Said after the refusal of a running job when the flag was not given. */
  runningHint?: string;
  /** See `JobAction.waitsForStoppedRun`. */
  waitsForStoppedRun?: boolean;
  apply(client: Client, id: string, flagged: boolean): Promise<boolean>;
  /** What the job is now, read after the action, for the human-readable line. */
  outcome(after: Job): string;
}

/** `skiplock jobs <action> <id>`: one state change that only some statuses allow. */
export function jobActionCommand(spec: JobActionSpec): Command {
  return {
    name: `jobs ${spec.action}`,
    summary: spec.summary,
    usage: [
      `usage: skiplock jobs ${spec.action} <id>${spec.flag ? ` [--${spec.flag}]` : ''} [--json] [--database-url URL]`,
      '',
      ...spec.help,
    ].join('\n'),
    async run(args, io) {
      const { values, positionals } = parseOptions(args, {
        ...databaseOption,
        ...jsonOption,
        ...(spec.flag ? { [spec.flag]: { type: 'boolean' as const } } : {}),
      });
      const id = parseJobId(positionalArgs(positionals, ['<id>'])[0]!);
      const url = databaseUrl(values['database-url'], io.env);
      // Loaded late so `--help` and argument errors never pay for the queue and pg modules.
      const { applyJobAction } = await import('../job-action.js');
      const flagged =
        spec.flag !== undefined && (values as Record<string, unknown>)[spec.flag] === true;
      const { before, after } = await applyJobAction(url, id, spec, flagged);
      if (values.json) {
        printJson(io, { id, previousStatus: before.status, status: after.status });
      } else {
        io.stdout(`job ${id} (${before.jobType}) was ${before.status}; ${spec.outcome(after)}\n`);
      }
      return 0;
    },
  };
}
