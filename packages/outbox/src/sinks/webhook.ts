import { ConfigError } from '@skiplock/queue';
import type { Logger } from 'pino';
import { Webhook } from 'standardwebhooks';
import { failed, type Delivery, type OutboxMessage, type Sink } from '../sink.js';
import { parseRetryAfter } from './retry-after.js';

export interface WebhookSinkOptions {
  /** Where to POST; a function picks the endpoint per message (by topic, say). */
  url: string | ((message: OutboxMessage) => string);
  /** A Standard Webhooks secret: `whsec_` followed by the base64 key the receiver also holds. */
  secret: string;
  /** Per request, including reading the response: whole ms from 1 to 3 600 000. Default 10 000. */
  timeoutMs?: number;
  /** Sent with every request (an auth header, say). Never logged; a message cannot override them. */
  headers?: Record<string, string>;
  /** Prepended to the outbox id to make the `webhook-id`. Default `msg_`. */
  idPrefix?: string;
  /** Requests in flight at once within one batch. Default 16. */
  concurrency?: number;
  /** Gets reason codes and statuses per failed message; never payloads, secrets or header values. */
  logger?: Logger;
}

const knownOptions = new Set([
  'url',
  'secret',
  'timeoutMs',
  'headers',
  'idPrefix',
  'concurrency',
  'logger',
]);
/**
 * Headers the sink owns: the signed ones (a message must not forge them) and those describing the
 * connection and body framing, which fetch either rejects or sends on, breaking the request.
 */
const ownHeaders = new Set([
  'content-type',
  'webhook-id',
  'webhook-timestamp',
  'webhook-signature',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'expect',
  'te',
  'trailer',
  'host',
]);
/** Read past this and the connection is dropped instead of reused: not worth the wait. */
const drainLimitBytes = 64 * 1024;
const errorTextChars = 200;
/** An hour: longer is no timeout at all, and past 2^31-1 ms Node's timers misfire. */
const MAX_TIMEOUT_MS = 3_600_000;

/**
 * A sink that POSTs each message to an HTTP endpoint, signed per Standard Webhooks
 * (https://www.standardwebhooks.com), with the spec's envelope `{type, timestamp, data}` as the body.
 * The `webhook-id` is the same on every attempt, so the receiver de-duplicates re-deliveries.
 */
export function webhookSink(options: WebhookSinkOptions): Sink {
  const { url, timeoutMs = 10_000, idPrefix = 'msg_', concurrency = 16, logger } = options;
  for (const key of Object.keys(options)) {
    if (!knownOptions.has(key)) throw configError(`unknown option "${key}"`);
  }
  const webhook = signer(options.secret);
  if (typeof url === 'string') {
    if (!isHttpUrl(url)) {
      throw configError('url must be an http: or https: URL without a user or password in it');
    }
    const port = badPort(url);
    if (port !== undefined) throw configError(`url: fetch refuses port ${port} (a "bad port")`);
  } else if (typeof url !== 'function') {
    throw configError('url must be a string or a function of the message');
  }
  // Node fires a timer of more than 2^31-1 ms after 1 ms: every request would time out at once.
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_TIMEOUT_MS)
    throw configError(
      `timeoutMs must be an integer from 1 to ${MAX_TIMEOUT_MS}, got ${String(timeoutMs)}`,
    );
  if (!Number.isInteger(concurrency) || concurrency <= 0)
    throw configError('concurrency must be a positive integer');
  if (typeof idPrefix !== 'string' || !/^[\x21-\x7e]*$/.test(idPrefix))
    throw configError('idPrefix must be printable ASCII without spaces');
  const staticHeaders = Object.entries(options.headers ?? {});
  for (const [name, value] of staticHeaders) {
    if (ownHeaders.has(name.toLowerCase()))
      throw configError(`headers: "${name}" is set by the sink itself`);
    // Not echoed, as a bad value below: it may be a credential.
    if (typeof value !== 'string')
      throw configError(`headers: "${name}" must be a string, not ${kindOf(value)}`);
    // Checked here so a bad header fails at startup, not as every message's delivery error.
    if (setHeader(new Headers(), name, value))
      throw configError(`headers: "${name}" is not a valid header name or value`);
  }

  async function deliverOne(message: OutboxMessage, signal: AbortSignal): Promise<Delivery> {
    const log = { messageId: message.id, topic: message.topic, attempt: message.attempt };
    let target: string;
    try {
      target = typeof url === 'string' ? url : url(message);
    } catch (error) {
      logger?.warn({ ...log, reason: 'webhook_bad_url' }, 'webhook url function threw');
      return failed(`webhook url function threw: ${errorText(error)}`, { permanent: true });
    }
    if (!isHttpUrl(target)) {
      // Not echoed: a URL can carry a token in its query.
      logger?.warn({ ...log, reason: 'webhook_bad_url' }, 'webhook url is not an http(s) URL');
      return failed(
        'webhook url for this message is not an http: or https: URL without credentials',
        {
          permanent: true,
        },
      );
    }
    const port = badPort(target);
    if (port !== undefined) {
      logger?.warn({ ...log, reason: 'webhook_bad_url', port }, 'webhook url port is refused');
      return failed(`webhook url for this message: fetch refuses port ${port} (a "bad port")`, {
        permanent: true,
      });
    }

    const id = idPrefix + message.id;
    const now = new Date();
    // Serialized once: the signature covers exactly these bytes (UTF-8 either way).
    const body = JSON.stringify({
      type: message.topic,
      timestamp: message.createdAt.toISOString(),
      data: message.payload,
    });
    const headers = new Headers();
    for (const [name, value] of [...Object.entries(message.headers), ...staticHeaders]) {
      if (ownHeaders.has(name.toLowerCase())) continue;
      const bad = setHeader(headers, name, value);
      if (bad) {
        logger?.warn({ ...log, reason: 'webhook_bad_header' }, 'message header is not valid HTTP');
        return failed(`message header "${bad}" is not a valid header name or value`, {
          permanent: true,
        });
      }
    }
    headers.set('content-type', 'application/json');
    headers.set('webhook-id', id);
    headers.set('webhook-timestamp', String(Math.floor(now.getTime() / 1_000)));
    headers.set('webhook-signature', webhook.sign(id, now, body));

    const timeout = AbortSignal.timeout(timeoutMs);
    let response: Response;
    try {
      response = await fetch(target, {
        method: 'POST',
        headers,
        body,
        redirect: 'manual',
        signal: AbortSignal.any([signal, timeout]),
      });
    } catch (error) {
      if (signal.aborted) {
        logger?.debug({ ...log, reason: 'webhook_aborted' }, 'webhook request aborted');
        return failed('webhook request aborted: the relay gave up on the batch');
      }
      if (timeout.aborted) {
        logger?.debug({ ...log, reason: 'webhook_timeout', timeoutMs }, 'webhook timed out');
        return failed(`webhook request timed out after ${timeoutMs} ms`);
      }
      // Counted as an attempt, refused connections too, not `unavailable` as a broker's are: a
      // webhook sink's URL (or one per message) names a receiver, and a wrong URL or port must
      // still end dead rather than wait for good without an operator hearing of it.
      const cause = networkCause(error);
      logger?.debug(
        { ...log, reason: 'webhook_network_error', code: cause.code },
        'webhook request failed',
      );
      return failed(`webhook request failed: ${cause.text}`);
    }

    const { status } = response;
    const text = await drain(response);
    if (status >= 200 && status < 300) return { ok: true };
    const note = status < 400 ? ' (redirects are not followed)' : '';
    const error = `webhook answered HTTP ${status}${note}`;
    const detail = text ? { detail: text } : {};
    if (status === 408 || status === 429 || status >= 500) {
      const retryAfterMs = parseRetryAfter(response.headers.get('retry-after'));
      const reason =
        retryAfterMs === undefined ? 'webhook_retryable_status' : 'webhook_retry_after';
      logger?.debug({ ...log, reason, status, retryAfterMs }, 'webhook asked for a retry');
      return failed(error, retryAfterMs === undefined ? detail : { ...detail, retryAfterMs });
    }
    logger?.warn({ ...log, reason: 'webhook_rejected', status }, 'webhook refused the message');
    return failed(error, { ...detail, permanent: true });
  }

  return {
    name: 'webhook',
    async deliver(messages, signal) {
      const results = new Array<Delivery>(messages.length);
      let next = 0;
      const worker = async () => {
        while (next < messages.length) {
          const index = next++;
          // Past the batch's deadline, the rest are not sent at all: their attempts do not count.
          results[index] = signal.aborted
            ? failed('not sent: the relay gave up on the batch first', { notSent: true })
            : await deliverOne(messages[index]!, signal).catch((error: unknown) => failed(error));
        }
      };
      await Promise.all(Array.from({ length: Math.min(concurrency, messages.length) }, worker));
      return results;
    },
    async close() {},
  };
}

function configError(detail: string): ConfigError {
  return new ConfigError(`webhookSink options: ${detail}`);
}

/** Refuses a secret the receiver could not share: without `whsec_`, not base64, or empty. */
function signer(secret: unknown): Webhook {
  const invalid = configError(
    'secret must be a Standard Webhooks secret: "whsec_" followed by a non-empty base64 key',
  );
  if (typeof secret !== 'string' || !secret.startsWith('whsec_')) throw invalid;
  const key = secret.slice('whsec_'.length);
  if (key.length === 0 || key.length % 4 !== 0 || !/^[A-Za-z0-9+/]+={0,2}$/.test(key))
    throw invalid;
  try {
    return new Webhook(secret);
  } catch {
    throw invalid;
  }
}

/** http(s) and no user or password: fetch refuses those with an error that echoes the URL. */
function isHttpUrl(value: unknown): boolean {
  if (typeof value !== 'string') return false;
  try {
    const { protocol, username, password } = new URL(value);
    return (protocol === 'http:' || protocol === 'https:') && !username && !password;
  } catch {
    return false;
  }
}

/**
 * The Fetch standard's "bad ports" (https://fetch.spec.whatwg.org/#bad-port), which Node's fetch
 * refuses without a request: its error read as a network failure, retried until dead (found in
 * review).
 */
const BAD_PORTS = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102,
  103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465,
  512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993,
  995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668,
  6669, 6679, 6697, 10080,
]);

/** The port of an http(s) URL when fetch refuses it; a default port (80, 443) never is. */
function badPort(value: string): number | undefined {
  const port = Number(new URL(value).port);
  return BAD_PORTS.has(port) ? port : undefined;
}

/**
 * What fetch sends as a header value: tab, visible ASCII, space and bytes 0x80-0xFF. `Headers`
 * takes a control character other than CR, LF and NUL, and fetch then refuses the request, which
 * read as a network error and was retried through every backoff (found in review).
 */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** Sets one header; returns its name when invalid, because fetch's own error echoes the value. */
function setHeader(headers: Headers, name: string, value: string): string | undefined {
  // `Headers` strips HTTP whitespace (CR, LF, tab, space) at either end first, as before.
  if (!FIELD_VALUE.test(value.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, ''))) return name;
  try {
    headers.set(name, value);
    return undefined;
  } catch {
    return name;
  }
}

/**
 * Reads the body so a small one frees the connection for reuse, stopping after `drainLimitBytes`
 * so a large one is never buffered. Returns its start, for the error text only.
 */
async function drain(response: Response): Promise<string> {
  if (!response.body) return '';
  const reader = response.body.getReader();
  const head: Uint8Array[] = [];
  let headBytes = 0;
  let total = 0;
  try {
    while (true) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (headBytes < errorTextChars * 4) {
        const part = value.subarray(0, errorTextChars * 4 - headBytes);
        head.push(part);
        headBytes += part.byteLength;
      }
      if (total > drainLimitBytes) {
        await reader.cancel();
        break;
      }
    }
  } catch {
    // The status alone decides the outcome; a body cut short by the timeout changes nothing.
  }
  return new TextDecoder()
    .decode(Buffer.concat(head))
    .replace(/[\s\p{Cc}]+/gu, ' ')
    .trim()
    .slice(0, errorTextChars);
}

/** Node's fetch throws a bare "fetch failed"; the socket error it wraps says what went wrong. */
function networkCause(error: unknown): { code: string | undefined; text: string } {
  const cause = error instanceof Error && error.cause instanceof Error ? error.cause : error;
  const code = (cause as { code?: unknown } | undefined)?.code;
  const message = errorText(cause);
  if (typeof code !== 'string') return { code: undefined, text: message || 'unknown error' };
  return { code, text: message.includes(code) ? message : `${code} ${message}`.trim() };
}

/** What a value is, for an error that must not show it. */
function kindOf(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
