import type { Client } from '@skiplock/queue';
import type pg from 'pg';

// The queue library (drizzle, zod, pino) is imported only by commands that reach the database,
// so --help and command-line errors answer without loading it.

/** A queue client on the command's pool that logs nothing (the CLI reports errors itself). */
export async function silentClient(pool: pg.Pool): Promise<Client> {
  const [{ createClient }, { pino }] = await Promise.all([
    import('@skiplock/queue'),
    import('pino'),
  ]);
  return createClient({ pool, logger: pino({ level: 'silent' }) });
}
