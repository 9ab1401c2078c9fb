/** Every error skiplock throws carries a stable string `code` that logs and callers can match on. */
export class SkiplockError extends Error {
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

export interface PayloadIssue {
  path: string;
  message: string;
}

export class InvalidPayloadError extends SkiplockError {
  constructor(
    readonly jobType: string,
    readonly issues: PayloadIssue[],
  ) {
    super(
      'invalid_payload',
      `invalid payload for job type "${jobType}": ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`,
    );
  }
}

export class PayloadTooLargeError extends SkiplockError {
  constructor(
    readonly jobType: string,
    readonly sizeBytes: number,
    readonly maxBytes: number,
  ) {
    super(
      'payload_too_large',
      `payload for job type "${jobType}" is ${sizeBytes} bytes, over the limit of ${maxBytes} bytes`,
    );
  }
}

export class UnknownJobTypeError extends SkiplockError {
  constructor(readonly jobType: string) {
    super('unknown_type', `unknown job type "${jobType}": no definition is registered for it`);
  }
}

export class ConfigError extends SkiplockError {
  constructor(message: string) {
    super('invalid_config', message);
  }
}

/** Throw this (or list your own class in `nonRetryable`) to send a job straight to dead. */
export class NonRetryableError extends SkiplockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('non_retryable', message, options);
  }
}

/**
 * Marks every copy's `NonRetryableError` (a registered symbol, the same in each): a job's code
 * may import another copy of this package than its worker's (a global CLI running the app's
 * module, a nested version, a bundle), and `instanceof` then failed: the error was retried to
 * `maxAttempts`, running a declined card's charge again each time (found in an audit).
 */
export const NON_RETRYABLE = Symbol.for('skiplock.non_retryable');
Object.defineProperty(NonRetryableError.prototype, NON_RETRYABLE, { value: true });

/** The reason an AbortSignal fires when the per-attempt timeout passes. */
export class JobTimeoutError extends SkiplockError {
  constructor(readonly timeoutMs: number) {
    super('timeout', `job attempt timed out after ${timeoutMs} ms`);
  }
}

/** The reason an AbortSignal fires when the worker no longer owns the job's lease. */
export class LockLostError extends SkiplockError {
  constructor(readonly jobId: string) {
    super('lock_lost', `job ${jobId} is no longer locked by this worker`);
  }
}

/** The reason an AbortSignal fires when a worker stops before the job finished. */
export class ShutdownError extends SkiplockError {
  constructor() {
    super('shutdown', 'worker is shutting down');
  }
}

/**
 * The text of anything thrown, as it can be stored. PostgreSQL's text holds no NUL: a handler's
 * error with one failed every write of its failure (retried as if the database were down), and
 * the job waited for its lease to run out, its error lost (found in an audit).
 */
export function errorMessage(error: unknown): string {
  return storableText(rawMessage(error));
}

function rawMessage(error: unknown): string {
  if (error instanceof Error) return error.message || error.name;
  if (typeof error === 'string') return error;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}

/**
 * The text of anything thrown, for logs and spans: an `InvalidPayloadError` names its fields
 * only. Its message holds the validator's messages, which may quote the refused value (valibot's
 * do: `Received "alice@…"`), and the enqueue's log line already kept to the fields while the
 * worker's and the scheduler's logged the whole message (found in an audit). Stored errors
 * (`last_error`) keep the whole message, for operators.
 */
export function loggableMessage(error: unknown): string {
  const text = (error as { [LOG_TEXT]?: unknown } | null)?.[LOG_TEXT];
  if (typeof text === 'string') return text;
  if (error instanceof InvalidPayloadError) {
    const fields = [...new Set(error.issues.map((i) => i.path))].join(', ');
    return storableText(`invalid payload for job type "${error.jobType}" at ${fields}`);
  }
  return errorMessage(error);
}

/** Whether `loggableMessage` gives other text than the error's own message. */
export function hasLoggableText(error: unknown): boolean {
  return (
    error instanceof InvalidPayloadError ||
    typeof (error as { [LOG_TEXT]?: unknown } | null)?.[LOG_TEXT] === 'string'
  );
}

// Registered, as NON_RETRYABLE is: the same in every copy of this package.
const LOG_TEXT = Symbol.for('skiplock.log_text');

/**
 * `error`, logged and set on spans as `text` (see `loggableMessage`) while its message, stored as
 * the job's error, stays whole: for a message that holds a validator's messages, which may quote
 * the value (the saga's stored-input and child-input checks).
 */
export function loggedAs<E extends Error>(error: E, text: string): E {
  Object.defineProperty(error, LOG_TEXT, { value: storableText(text) });
  return error;
}

/** `text` with each NUL, which PostgreSQL's text cannot hold, replaced by U+FFFD. */
export function storableText(text: string): string {
  return text.includes('\u0000') ? text.replaceAll('\u0000', '\ufffd') : text;
}
