import { CliError } from './args.js';

/** Where a connection URL points, for messages: host:port, user and database, never a password. */
export function describeTarget(url: string): { address: string; user: string; database: string } {
  const parsed = new URL(url);
  const host = parsed.hostname || parsed.searchParams.get('host') || 'localhost';
  return {
    address: `${host}:${parsed.port || '5432'}`,
    user: decodeURIComponent(parsed.username) || 'the default user',
    database: decodeURIComponent(parsed.pathname.slice(1)) || 'the default database',
  };
}

const networkCauses: Record<string, string> = {
  ECONNREFUSED: 'connection refused (is PostgreSQL running there?)',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'host name lookup failed',
  ETIMEDOUT: 'connection timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ECONNRESET: 'connection reset by the server',
  EPIPE: 'connection closed by the server',
};

function errorCode(error: unknown): string | undefined {
  const e = error as { code?: unknown; errors?: { code?: unknown }[]; cause?: unknown };
  if (typeof e?.code === 'string') return e.code;
  // drizzle wraps a failed statement's server error ("Failed query: ...") as its cause.
  if (e?.cause !== undefined && e.cause !== error) return errorCode(e.cause);
  // Node 20 tries every address of a host name and reports an AggregateError of the attempts.
  const inner = Array.isArray(e?.errors) ? e.errors[0]?.code : undefined;
  return typeof inner === 'string' ? inner : undefined;
}

/**
 * A one-line reason for a failure to reach or use the database, or null when the error is not
 * about the connection (a query error, say) and should be reported as it is.
 */
export function describeDatabaseError(error: unknown, url: string): string | null {
  const { address, user, database } = describeTarget(url);
  const code = errorCode(error);
  const message = error instanceof Error ? error.message : String(error);
  const at = `cannot use PostgreSQL at ${address}`;
  if (code && networkCauses[code]) return `${at}: ${networkCauses[code]}`;
  switch (code) {
    case '28P01':
      return `${at}: password authentication failed for user "${user}"`;
    case '28000':
      return `${at}: the server refused user "${user}": ${message}`;
    case '3D000':
      return `${at}: database "${database}" does not exist`;
    case '57P03':
      return `${at}: the server is starting up or shutting down`;
    case '53300':
      return `${at}: the server has too many connections`;
    case '42P01':
      // The outbox's migrations are not part of a plain `skiplock migrate`.
      if (/outbox_messages/.test(message)) {
        return `the outbox is not installed in database "${database}" at ${address} (no table skiplock.outbox_messages); run \`skiplock migrate --outbox\``;
      }
      // A table of a later migration is missing: the schema predates this version of skiplock.
      if (
        /"?skiplock"?\./.test(message) ||
        /relation "(sagas|saga_steps|saga_signals|jobs)"/.test(message)
      ) {
        return `the skiplock schema in database "${database}" at ${address} is out of date (${message}); run \`skiplock migrate\``;
      }
  }
  if (/timeout expired|connection timeout/i.test(message)) {
    return `${at}: connection timed out`;
  }
  if (/Connection terminated/i.test(message)) {
    return `${at}: the server closed the connection`;
  }
  if (/SASL|password must be a string/i.test(message)) {
    return `${at}: the server asks for a password; put it in the URL`;
  }
  return null;
}

/** Turns connection failures into a CliError with a clear message; other errors pass through. */
export function databaseError(error: unknown, url: string): unknown {
  const reason = describeDatabaseError(error, url);
  return reason === null ? error : new CliError(reason);
}
