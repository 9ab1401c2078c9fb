import { parseArgs, type ParseArgsConfig } from 'node:util';
import { suggestion } from './suggest.js';

/** A bad command line: printed with the command's usage, exit code 2. */
export class UsageError extends Error {}

/** A command that ran but could not do what was asked (exit code 1); the message says why. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

type OptionsConfig = NonNullable<ParseArgsConfig['options']>;

/** Strict option parsing shared by commands: unknown flags are errors that name the flag. */
/** Options whose empty value means their default: a paging loop's first call passes it so. */
const EMPTY_IS_DEFAULT = new Set(['cursor']);

export function parseOptions<const O extends OptionsConfig>(args: string[], options: O) {
  let parsed;
  try {
    parsed = parseArgs({ args, options, strict: true, allowPositionals: true });
  } catch (error) {
    throw new UsageError(parseErrorMessage(error, Object.keys(options)));
  }
  // No option takes an empty value but `--cursor`, where it means the first page. Passed on, an
  // empty filter was taken for none (`jobs list --queue ''` listed the jobs of every queue as if
  // filtered; found by an audit), and `--host ''` listened on every address.
  for (const [name, value] of Object.entries(parsed.values)) {
    if (EMPTY_IS_DEFAULT.has(name)) continue;
    for (const one of Array.isArray(value) ? value : [value]) {
      if (typeof one === 'string' && one.trim() === '') {
        throw new UsageError(`--${name} must not be empty`);
      }
    }
  }
  return parsed;
}

function parseErrorMessage(error: unknown, names: readonly string[]): string {
  const message = error instanceof Error ? error.message : String(error);
  const unknown = /^Unknown option '([^']+)'/.exec(message);
  if (unknown) {
    const given = unknown[1]!;
    // Commands already got a "did you mean"; a mistyped option (`--prot`) said only "unknown"
    // (found by a newcomer's trial of the README).
    const options = names.map((name) => `--${name}`);
    return `unknown option ${given}${given.startsWith('--') ? suggestion(given, options) : ''}`;
  }
  const missing = /^Option '(-\S+)(?: <value>)?' argument missing/.exec(message);
  if (missing) return `option ${missing[1]} needs a value`;
  // Node's own wording (e.g. a boolean flag given a value) already names the option.
  return message.split('. ')[0] ?? message;
}

/** Exactly `names.length` positionals, or a UsageError naming the missing or extra one. */
export function positionalArgs(positionals: string[], names: string[]): string[] {
  if (positionals.length < names.length) {
    throw new UsageError(`missing ${names[positionals.length]}`);
  }
  if (positionals.length > names.length) {
    throw new UsageError(`unexpected argument "${positionals[names.length]}"`);
  }
  return positionals;
}

export function parseInteger(
  flag: string,
  value: string | undefined,
  { min, max }: { min: number; max: number },
): number | undefined {
  if (value === undefined) return undefined;
  const n = /^-?[0-9]+$/.test(value.trim()) ? Number(value) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    throw new UsageError(`${flag} must be an integer from ${min} to ${max}, got "${value}"`);
  }
  return n;
}

const BIGINT_ID = /^[1-9][0-9]{0,18}$/;

const MAX_BIGINT = 9_223_372_036_854_775_807n;

/** A row id of a bigint column (a job's, an outbox message's): a positive integer that fits. */
export function parseId(value: string, flag: string, what: string): string {
  if (!BIGINT_ID.test(value) || BigInt(value) > MAX_BIGINT) {
    throw new UsageError(`${flag} must be ${what} (a positive integer), got "${value}"`);
  }
  return value;
}

export function parseJobId(value: string, flag = '<id>'): string {
  return parseId(value, flag, 'a job id');
}

// The saga package's own rule for ids: 1-200 characters, no whitespace or control characters.
const SAGA_ID = /^[^\s\p{Cc}]{1,200}$/u;

export function parseSagaId(value: string): string {
  if (!SAGA_ID.test(value)) {
    throw new UsageError('<id> must be 1-200 printable characters without spaces');
  }
  return value;
}

export function databaseUrl(value: string | undefined, env: NodeJS.ProcessEnv): string {
  const url = value ?? env.DATABASE_URL;
  if (!url) throw new UsageError('no database: pass --database-url or set DATABASE_URL');
  let parsed: URL | null = null;
  try {
    parsed = new URL(url);
  } catch {
    // reported below without echoing the URL, which may hold a password
  }
  if (!parsed || !/^postgres(ql)?:$/.test(parsed.protocol)) {
    throw new UsageError('--database-url (or DATABASE_URL) must be a postgres:// URL');
  }
  // pg decodes these parts itself; a bad escape (`%zz`) failed as a bare "URI malformed".
  for (const [part, text] of [
    ['user name', parsed.username],
    ['password', parsed.password],
    ['database name', parsed.pathname],
  ] as const) {
    try {
      decodeURIComponent(text);
    } catch {
      throw new UsageError(
        `--database-url (or DATABASE_URL): its ${part} holds a % that is not a percent-escape (write %25 for %)`,
      );
    }
  }
  return url;
}

/** Options every database command takes. */
export const databaseOption = { 'database-url': { type: 'string' } } as const;
export const jsonOption = { json: { type: 'boolean' } } as const;
