import { DevDatabaseError } from '@skiplock/devdb';

// Failures to reach or log in to the server in DATABASE_URL: its address, user or database.
const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  '28P01',
  '28000',
  '3D000',
]);

/** Node 20 tries every address of a host name and reports an AggregateError of the attempts. */
function firstCause(error: unknown): unknown {
  return error instanceof AggregateError && error.errors.length > 0 ? error.errors[0] : error;
}

/**
 * Why `pnpm demo` failed, on one line naming the problem and its fix, for the failures a user can
 * act on (a DATABASE_URL that does not work, a throwaway server that cannot start); else the
 * stack, since anything else is a bug.
 */
export function describeFailure(error: unknown): string {
  if (error instanceof DevDatabaseError) return error.message;
  const cause = firstCause(error);
  const code = (cause as { code?: unknown } | null)?.code;
  const message = cause instanceof Error ? cause.message : String(cause);
  // The server names the role; the same code also covers pg_hba.conf refusals, said as they are.
  const role = code === '28000' ? /role "(.+)" does not exist/.exec(message)?.[1] : undefined;
  if (role !== undefined)
    return `role "${role}" does not exist; use an existing role in DATABASE_URL`;
  if (typeof code === 'string' && CONNECTION_CODES.has(code)) {
    return `cannot use the database (${message}); check DATABASE_URL, or unset it to use a throwaway PostgreSQL`;
  }
  if (code === '42501') {
    return `${message}; the DATABASE_URL user must be allowed to create databases`;
  }
  return error instanceof Error ? (error.stack ?? message) : message;
}
