import { parseArgs } from 'node:util';
import { z } from 'zod';

const rate = (name: string, max = 1) =>
  z.coerce
    .number({ error: `--${name} must be a number between 0 and ${max}` })
    .min(0, `--${name} must be between 0 and ${max}`)
    .max(max, `--${name} must be between 0 and ${max}`);

const int = (name: string, min: number, max: number) =>
  z.coerce
    .number({ error: `--${name} must be a whole number from ${min} to ${max}` })
    .int(`--${name} must be a whole number from ${min} to ${max}`)
    .min(min, `--${name} must be a whole number from ${min} to ${max}`)
    .max(max, `--${name} must be a whole number from ${min} to ${max}`);

export const demoFlagsSchema = z.object({
  count: int('count', 1, 100_000).default(300),
  workers: int('workers', 1, 16).default(3),
  concurrency: int('concurrency', 1, 100).default(10),
  customers: int('customers', 1, 10_000).default(50),
  'decline-rate': rate('decline-rate').default(0.1),
  // Below 1 so that retries eventually get through; at 1 every step after the pivot would fail.
  'transient-rate': rate('transient-rate', 0.9).default(0.1),
  'late-confirm-rate': rate('late-confirm-rate').default(0.1),
  'deadline-seconds': int('deadline-seconds', 5, 3_600).default(300),
  'kill-workers': z.boolean().default(false),
  keep: z.boolean().default(false),
});

export type DemoFlags = z.output<typeof demoFlagsSchema>;

export const usage = `Usage: pnpm demo [flags]

Runs billing sagas on worker processes and prints what happened to the money.

  --count N              sagas to run (default 300)
  --workers N            worker processes (default 3)
  --concurrency N        jobs each worker runs at once (default 10)
  --customers N          customers the invoices are spread over (default 50)
  --decline-rate R       share of card charges declined, 0..1 (default 0.1)
  --transient-rate R     share of provider and receipt calls that fail and retry, 0..0.9 (default 0.1)
  --late-confirm-rate R  share of charges confirmed later by webhook, 0..1 (default 0.1)
  --deadline-seconds N   give up and exit 1 if sagas are still unfinished after this (default 300)
  --kill-workers         SIGKILL a worker process mid-run and start a replacement
  --keep                 keep the demo database (only with DATABASE_URL) instead of dropping it
  --help                 this text

Without DATABASE_URL an embedded PostgreSQL is started; with it, a fresh database is created on
that server and dropped at the end.`;

export class FlagError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'FlagError';
  }
}

/** Parses argv; throws `FlagError` naming the bad flag, or returns null when --help was asked. */
export function parseDemoFlags(argv: readonly string[]): DemoFlags | null {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        count: { type: 'string' },
        workers: { type: 'string' },
        concurrency: { type: 'string' },
        customers: { type: 'string' },
        'decline-rate': { type: 'string' },
        'transient-rate': { type: 'string' },
        'late-confirm-rate': { type: 'string' },
        'deadline-seconds': { type: 'string' },
        'kill-workers': { type: 'boolean' },
        keep: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (error) {
    throw new FlagError(describeParseError(error));
  }
  if (values.help) return null;
  const { help: _help, ...rest } = values;
  // An empty string would coerce to 0; refuse it with the flag's own message instead.
  for (const [name, value] of Object.entries(rest)) {
    if (value === '') throw new FlagError(`--${name} needs a value`);
  }
  const parsed = demoFlagsSchema.safeParse(rest);
  if (!parsed.success) {
    throw new FlagError(parsed.error.issues.map((issue) => issue.message).join('; '));
  }
  return parsed.data;
}

function describeParseError(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const code = (error as { code?: string }).code;
  const flag = /'(-{1,2}[^' ]+)/.exec(message)?.[1];
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return `unknown flag ${flag ?? message}`;
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
    const name = flag ?? 'a flag';
    if (/ambiguous/.test(message)) {
      return `${name} needs a value; for one starting with "-" write ${name}=<value>`;
    }
    if (/does not take an argument/.test(message)) return `${name} takes no value`;
    return `${name} needs a value`;
  }
  if (code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL')
    return `unexpected argument: ${message.split("'")[1] ?? message}`;
  return message;
}
