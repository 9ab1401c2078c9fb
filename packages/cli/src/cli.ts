import { readFileSync } from 'node:fs';
import { CliError, UsageError } from './args.js';
import { dashboardCommand } from './commands/dashboard.js';
import { jobsCancelCommand } from './commands/jobs-cancel.js';
import { jobsListCommand } from './commands/jobs-list.js';
import { jobsRetryCommand } from './commands/jobs-retry.js';
import { jobsShowCommand } from './commands/jobs-show.js';
import { migrateCommand } from './commands/migrate.js';
import {
  outboxDeadCommand,
  outboxKillCommand,
  outboxRetryCommand,
  outboxStatsCommand,
} from './commands/outbox.js';
import { rolesCommand } from './commands/roles.js';
import {
  sagasCancelCommand,
  sagasRetryCommand,
  sagasSignalCommand,
} from './commands/saga-actions.js';
import { sagasGraphCommand } from './commands/sagas-graph.js';
import { sagasListCommand } from './commands/sagas-list.js';
import { sagasReconcileCommand } from './commands/sagas-reconcile.js';
import { sagasShowCommand } from './commands/sagas-show.js';
import {
  schedulesListCommand,
  schedulesPauseCommand,
  schedulesRemoveCommand,
  schedulesResumeCommand,
} from './commands/schedules.js';
import { statsCommand } from './commands/stats.js';
import { workerCommand } from './commands/worker.js';
import { printJson, terminalSafeIo, withoutPasswords, type CliIo, type Command } from './io.js';
import { suggestion } from './suggest.js';

export type { CliIo, Command } from './io.js';

const commands: Command[] = [
  migrateCommand,
  workerCommand,
  statsCommand,
  jobsListCommand,
  jobsShowCommand,
  jobsRetryCommand,
  jobsCancelCommand,
  sagasListCommand,
  sagasShowCommand,
  sagasCancelCommand,
  sagasRetryCommand,
  sagasSignalCommand,
  sagasReconcileCommand,
  sagasGraphCommand,
  schedulesListCommand,
  schedulesPauseCommand,
  schedulesResumeCommand,
  schedulesRemoveCommand,
  outboxStatsCommand,
  outboxDeadCommand,
  outboxRetryCommand,
  outboxKillCommand,
  rolesCommand,
  dashboardCommand,
];

function listing(list: readonly Command[]): string[] {
  const width = Math.max(...list.map((c) => c.name.length));
  return list.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`);
}

function help(): string {
  return [
    'usage: skiplock <command> [options]',
    '',
    'commands:',
    ...listing(commands),
    '',
    'Every command takes --help (or: skiplock help <command>); those that read the database',
    'take --database-url (default: $DATABASE_URL); listings and show commands take --json.',
    'skiplock --version prints the version.',
    'Exit codes: 0 done, 1 failed (message on stderr), 2 bad command line.',
    '',
  ].join('\n');
}

function groupHelp(group: string, members: readonly Command[]): string {
  return [`usage: skiplock ${group} <subcommand> [options]`, '', ...listing(members), ''].join(
    '\n',
  );
}

const wantsHelp = (args: readonly string[]) => args.includes('--help') || args.includes('-h');

/** This package's version, from its package.json (beside `src/` and `dist/` alike). */
function version(): string {
  const manifest = readFileSync(new URL('../package.json', import.meta.url), 'utf8');
  return (JSON.parse(manifest) as { version: string }).version;
}

/** Parses the command line and runs one command; returns the process exit code. */
export async function runCli(argv: string[], rawIo: CliIo): Promise<number> {
  const io = terminalSafeIo(rawIo);
  const [name, ...rest] = argv;
  // `skiplock help jobs list` is `skiplock jobs list --help`.
  if (name === 'help' && rest.length > 0) return runCli([...rest, '--help'], rawIo);
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    io.stdout(help());
    return name ? 0 : 2;
  }
  if (name === '--version' || name === '-V' || name === 'version') {
    io.stdout(`${version()}\n`);
    return 0;
  }
  let command = commands.find((c) => c.name === name);
  let args = rest;
  if (!command) {
    const members = commands.filter((c) => c.name.startsWith(`${name} `));
    if (members.length === 0) {
      // The first words of the commands: `stats`, `jobs`, `sagas`...
      const words = [...new Set(commands.map((c) => c.name.split(' ')[0]!))];
      io.stderr(`skiplock: unknown command "${name}"${suggestion(name, words)}\n\n${help()}`);
      return 2;
    }
    const [sub, ...subArgs] = rest;
    if (!sub || sub === '--help' || sub === '-h') {
      (sub ? io.stdout : io.stderr)(groupHelp(name, members));
      return sub ? 0 : 2;
    }
    command = members.find((c) => c.name === `${name} ${sub}`);
    if (!command) {
      const subs = members.map((c) => c.name.slice(name.length + 1));
      io.stderr(
        `skiplock: unknown ${name} subcommand "${sub}"${suggestion(sub, subs)}\n\n${groupHelp(name, members)}`,
      );
      return 2;
    }
    args = subArgs;
  }
  if (wantsHelp(args)) {
    io.stdout(`${command.usage}\n`);
    return 0;
  }
  // With --json, a failure is JSON on stdout too (`{ "error": { "message", "exitCode" } }`):
  // a script piping the output to a JSON reader got nothing at all (found by an audit).
  // Not when the command printed already (a refused `sagas cancel --json` prints its result).
  let printed = false;
  const commandIo: CliIo = {
    ...io,
    stdout: (text) => {
      printed = true;
      io.stdout(text);
    },
  };
  const failed = (message: string, exitCode: number) => {
    if (args.includes('--json') && !printed) {
      printJson(io, { error: { message: withoutPasswords(message), exitCode } });
    }
    return exitCode;
  };
  try {
    return await command.run(args, commandIo);
  } catch (error) {
    if (error instanceof UsageError) {
      // The synopsis (usage up to its first blank line) is enough to see what was expected.
      const synopsis = command.usage.split('\n\n')[0];
      io.stderr(
        `skiplock ${command.name}: ${error.message}\n\n${synopsis}\n` +
          `(skiplock ${command.name} --help for details)\n`,
      );
      return failed(error.message, 2);
    }
    if (error instanceof CliError) {
      io.stderr(`skiplock ${command.name}: ${error.message}\n`);
      return failed(error.message, error.exitCode);
    }
    // Unexpected failures still get one line, not a stack; SKIPLOCK_DEBUG=1 shows the stack.
    const message = (error as Error)?.message ?? String(error);
    const detail = io.env.SKIPLOCK_DEBUG ? (error as Error)?.stack : undefined;
    io.stderr(`skiplock ${command.name}: ${detail ?? message}\n`);
    return failed(message, 1);
  }
}
