import { pino, type Logger } from 'pino';

export type { Logger };

/**
 * The default logger when none is injected. Payloads are never passed to the logger; the
 * `redact` list is a second line of defence for fields that commonly carry secrets.
 */
export function createDefaultLogger(name = 'skiplock'): Logger {
  return pino({
    name,
    level: process.env.SKIPLOCK_LOG_LEVEL ?? 'info',
    redact: ['payload', 'password', 'connectionString', '*.payload', '*.password'],
  });
}
