import { parseArgs } from 'node:util';
import { migrateCommand } from './commands/migrate.js';

export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
  env: NodeJS.ProcessEnv;
}

export class UsageError extends Error {}

export interface Command {
  name: string;
  summary: string;
  usage: string;
  run(args: string[], io: CliIo): Promise<number>;
}

const commands: Command[] = [migrateCommand];

function help(): string {
  const lines = commands.map((c) => `  ${c.name.padEnd(14)} ${c.summary}`);
  return [
    'usage: skiplock <command> [options]',
    '',
    'commands:',
    ...lines,
    '',
    'Every command takes --database-url (default: $DATABASE_URL) and --help.',
    '',
  ].join('\n');
}

/** Parses the command line and runs one command; returns the process exit code. */
export async function runCli(argv: string[], io: CliIo): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    io.stdout(help());
    return name ? 0 : 2;
  }
  const command = commands.find((c) => c.name === name);
  if (!command) {
    io.stderr(`skiplock: unknown command "${name}"\n\n${help()}`);
    return 2;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    io.stdout(`${command.usage}\n`);
    return 0;
  }
  try {
    return await command.run(rest, io);
  } catch (error) {
    if (
      error instanceof UsageError ||
      (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')
    ) {
      io.stderr(`skiplock ${command.name}: ${(error as Error).message}\n\n${command.usage}\n`);
      return 2;
    }
    io.stderr(`skiplock ${command.name}: ${(error as Error).message ?? String(error)}\n`);
    return 1;
  }
}

/** Strict option parsing shared by commands: unknown flags are errors that name the flag. */
export function parseOptions<T extends NonNullable<Parameters<typeof parseArgs>[0]>['options']>(
  args: string[],
  options: T,
  allowPositionals = false,
) {
  return parseArgs({ args, options, strict: true, allowPositionals });
}

export function databaseUrl(value: string | undefined, io: CliIo): string {
  const url = value ?? io.env.DATABASE_URL;
  if (!url) throw new UsageError('no database: pass --database-url or set DATABASE_URL');
  try {
    const parsed = new URL(url);
    if (!/^postgres(ql)?:$/.test(parsed.protocol)) throw new Error();
  } catch {
    throw new UsageError('--database-url must be a postgres:// URL');
  }
  return url;
}
