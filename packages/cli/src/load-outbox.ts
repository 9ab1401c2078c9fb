import { CliError } from './args.js';

/**
 * `@skiplock/outbox` is an optional peer of the CLI: only a project that has an outbox installs
 * it, and only the commands that need it (`skiplock outbox`, `migrate --outbox`) load it.
 */
export function loadOutbox(): Promise<typeof import('@skiplock/outbox')> {
  return importOptional(() => import('@skiplock/outbox'), '@skiplock/outbox');
}

/**
 * Imports an optional package, turning "not installed" into a CliError that says so. Only an
 * error that names the package itself: one of its own imports missing is another fault, and is
 * passed on as it is.
 */
export async function importOptional<T>(load: () => Promise<T>, name: string): Promise<T> {
  try {
    return await load();
  } catch (error) {
    const { code, message } = error as { code?: unknown; message?: unknown };
    const missing = code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND';
    if (missing && typeof message === 'string' && message.includes(`'${name}'`)) {
      throw new CliError(
        `${name} is not installed beside @skiplock/cli; install it in this project to use the outbox (skiplock outbox, migrate --outbox)`,
      );
    }
    throw error;
  }
}
