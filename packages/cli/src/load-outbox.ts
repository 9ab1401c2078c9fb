import { CliError } from './args.js';

/**
 * `@skiplock/outbox` is an optional peer of the CLI: only a project that has an outbox installs
 * it, and only the commands that need it (`skiplock outbox`, `migrate --outbox`) load it.
 */
export async function loadOutbox(): Promise<typeof import('@skiplock/outbox')> {
  try {
    return await import('@skiplock/outbox');
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') {
      throw new CliError(
        '@skiplock/outbox is not installed beside @skiplock/cli; install it to use the outbox commands',
      );
    }
    throw error;
  }
}
