import type { StandardSchemaV1 } from '@standard-schema/spec';
import { findJsonProblem } from '@skiplock/queue/engine';
import type { PublishIssue } from './errors.js';

/** What a caller hands to `publish`. */
export interface MessageInput<Topic extends string = string, Payload = unknown> {
  topic: Topic;
  /** Orders delivery: one message of a key in flight at a time, in publish order. */
  key?: string | null | undefined;
  payload: Payload;
  /** Passed to the broker as message headers (string values only). */
  headers?: Record<string, string> | undefined;
}

/** A message checked and ready to insert. */
export interface CheckedMessage {
  topic: string;
  key: string | null;
  payloadJson: string;
  headersJson: string;
}

const MAX_NAME = 255;
const MAX_HEADERS = 64;
const MAX_HEADER_VALUE = 4_096;
/**
 * A message's own headers, names and values in UTF-8, at most: what every sink can send (AMQP
 * encodes at most 64 KiB of headers, and common HTTP servers accept 8 to 16 KiB in all). Before,
 * 64 headers of 4,096 characters passed and went dead at delivery (found by an audit).
 */
export const MAX_HEADER_BYTES = 8_192;

// A topic becomes a NATS subject or an AMQP routing key: no spaces, none of NATS's wildcards, and
// no empty token between dots (NATS refuses `a..b`, `.a` and `a.`).
const TOPIC_PATTERN = /^[A-Za-z0-9_:/-]+(\.[A-Za-z0-9_:/-]+)*$/;
// PostgreSQL's text refuses NUL; a lone surrogate is not valid UTF-8. Either would fail the
// INSERT and abort the caller's transaction, which a refused message must never do.
// eslint-disable-next-line no-control-regex -- NUL is exactly what it looks for
const BAD_TEXT = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
// A key travels as a NATS header, and header values as NATS, AMQP and HTTP headers: a control
// character (CR and LF split a header; fetch refuses the others) could never be sent, and space
// or tab at either end is trimmed on the way, so the consumer would read another value. Refused
// at publish, where the caller hears it, not as a message dead at delivery (found in review).
// eslint-disable-next-line no-control-regex -- control characters are exactly what it looks for
const CONTROL = /[\u0000-\u0008\u000a-\u001f\u007f]/;
/** In a key, a tab too: a key is an identifier, never formatted text. */
// eslint-disable-next-line no-control-regex -- control characters are exactly what it looks for
export const KEY_CONTROL = /[\u0000-\u001f\u007f]/;
const EDGE_SPACE = /^[ \t]|[ \t]$/;

/**
 * Checks one message: its topic, key and headers, its payload against the topic's schema when
 * there is one (the schema's output is what is stored), and that the payload survives JSON as it
 * is. Every issue is collected, each at its path, so one error says all that is wrong.
 */
export async function checkMessage(
  input: MessageInput,
  path: string,
  schema: StandardSchemaV1 | undefined,
  maxPayloadBytes: number,
  issues: PublishIssue[],
): Promise<CheckedMessage | null> {
  const before = issues.length;
  if (typeof input !== 'object' || input === null) {
    issues.push({ path, message: 'a message must be an object with topic and payload' });
    return null;
  }
  const { topic, key, headers } = input;
  if (typeof topic !== 'string' || topic.length === 0 || topic.length > MAX_NAME) {
    issues.push({
      path: `${path}.topic`,
      message: `must be a string of 1 to ${MAX_NAME} characters`,
    });
  } else if (!TOPIC_PATTERN.test(topic)) {
    issues.push({
      path: `${path}.topic`,
      message:
        'may hold letters, digits and _ . : / - only, with no empty part between dots (it becomes a subject or routing key)',
    });
  }
  if (
    key !== undefined &&
    key !== null &&
    (typeof key !== 'string' || key.length === 0 || key.length > MAX_NAME)
  ) {
    issues.push({
      path: `${path}.key`,
      message: `must be null or a string of 1 to ${MAX_NAME} characters`,
    });
  } else if (typeof key === 'string' && BAD_TEXT.test(key)) {
    issues.push({ path: `${path}.key`, message: 'holds a NUL character or a lone surrogate' });
  } else if (typeof key === 'string' && KEY_CONTROL.test(key)) {
    issues.push({ path: `${path}.key`, message: 'holds a control character' });
  } else if (typeof key === 'string' && EDGE_SPACE.test(key)) {
    issues.push({ path: `${path}.key`, message: 'begins or ends with a space' });
  }
  const headerBytes = checkHeaders(headers, `${path}.headers`, issues);
  let payload: unknown = input.payload;
  if (schema) {
    const result = await schema['~standard'].validate(payload);
    if (result.issues) {
      for (const issue of result.issues) {
        const segments = (issue.path ?? []).map((s) => String(typeof s === 'object' ? s.key : s));
        issues.push({ path: [`${path}.payload`, ...segments].join('.'), message: issue.message });
      }
    } else {
      payload = result.value;
    }
  }
  if (payload === undefined) {
    issues.push({ path: `${path}.payload`, message: 'is required (null is a valid payload)' });
  } else if (issues.length === before) {
    const problem = findJsonProblem(payload, `${path}.payload`);
    if (problem) issues.push({ path: problem.path, message: problem.message });
  }
  if (issues.length > before) return null;
  const payloadJson = JSON.stringify(payload);
  const bytes = Buffer.byteLength(payloadJson);
  // Headers count too: NATS counts them in its max_payload (found by an audit).
  if (bytes + headerBytes > maxPayloadBytes) {
    issues.push({
      path: `${path}.payload`,
      message:
        headerBytes === 0
          ? `is ${bytes} bytes as JSON, over maxPayloadBytes ${maxPayloadBytes}`
          : `is ${bytes} bytes as JSON and the headers ${headerBytes}, over maxPayloadBytes ${maxPayloadBytes}`,
    });
    return null;
  }
  return {
    topic,
    key: key ?? null,
    payloadJson,
    headersJson: JSON.stringify(headers ?? {}),
  };
}

/** Checks a message's headers; returns their size (names and values, UTF-8 bytes). */
function checkHeaders(headers: unknown, path: string, issues: PublishIssue[]): number {
  if (headers === undefined) return 0;
  if (typeof headers !== 'object' || headers === null || Array.isArray(headers)) {
    issues.push({ path, message: 'must be an object of string values' });
    return 0;
  }
  const entries = Object.entries(headers);
  if (entries.length > MAX_HEADERS) {
    issues.push({ path, message: `has ${entries.length} entries, more than ${MAX_HEADERS}` });
  }
  let bytes = 0;
  for (const [name, value] of entries) {
    bytes += Buffer.byteLength(name) + (typeof value === 'string' ? Buffer.byteLength(value) : 0);
    if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,200}$/.test(name)) {
      issues.push({ path: `${path}.${name}`, message: 'is not a valid header name' });
    } else if (
      typeof value !== 'string' ||
      value.length > MAX_HEADER_VALUE ||
      /[\r\n]/.test(value)
    ) {
      issues.push({
        path: `${path}.${name}`,
        message: `must be a single-line string of at most ${MAX_HEADER_VALUE} characters`,
      });
    } else if (BAD_TEXT.test(value)) {
      issues.push({
        path: `${path}.${name}`,
        message: 'holds a NUL character or a lone surrogate',
      });
    } else if (CONTROL.test(value)) {
      issues.push({ path: `${path}.${name}`, message: 'holds a control character' });
    } else if (EDGE_SPACE.test(value)) {
      issues.push({ path: `${path}.${name}`, message: 'begins or ends with a space or tab' });
    }
  }
  if (bytes > MAX_HEADER_BYTES) {
    issues.push({
      path,
      message: `are ${bytes} bytes (names and values), more than ${MAX_HEADER_BYTES}`,
    });
  }
  return bytes;
}
