import type { StandardSchemaV1 } from '@standard-schema/spec';
import { ConfigError } from '@skiplock/queue';
import { runSql, type Queryable } from '@skiplock/queue/engine';
import { InvalidMessageError, type PublishIssue } from './errors.js';
import { insertMessages } from './sql/messages.js';
import { checkMessage, type CheckedMessage, type MessageInput } from './validate.js';

/**
 * The most bytes of payload (as JSON) and headers a message may have by default: 1 MiB, the
 * largest message a NATS server accepts by default, less 2 KiB for the headers the sinks add
 * (message id, topic and key: about 1.1 KB at most with their framing). NATS counts headers in
 * its limit, so a payload of the whole 1 MiB could never be published there (found by an audit).
 */
export const DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576 - 2_048;

/** Most messages one `publishMany` call writes (one statement). */
const MAX_BATCH = 10_000;

export type TopicSchemas = Record<string, StandardSchemaV1>;

/** A message whose payload is typed by its topic's schema. */
export type TypedMessage<T extends TopicSchemas> = {
  [K in keyof T & string]: MessageInput<K, StandardSchemaV1.InferInput<T[K]>>;
}[keyof T & string];

export interface OutboxOptions<T extends TopicSchemas> {
  /** A Standard Schema (zod, valibot, arktype) per topic; a payload is checked before it is written. */
  topics: T;
  /** Refuse topics not listed in `topics` (default true): a typo is caught at publish, not downstream. */
  strictTopics?: boolean | undefined;
  /** Most bytes of payload (as JSON) and headers together (default `DEFAULT_MAX_PAYLOAD_BYTES`). */
  maxPayloadBytes?: number | undefined;
}

export interface Outbox<T extends TopicSchemas> {
  /** Writes one message in `tx`'s transaction; returns its id. */
  publish(tx: Queryable, message: TypedMessage<T>): Promise<string>;
  /** Writes messages in `tx`'s transaction with one statement, in order; returns their ids. */
  publishMany(tx: Queryable, messages: readonly TypedMessage<T>[]): Promise<string[]>;
}

/**
 * An outbox with a schema per topic. `tx` is the caller's transaction (a pg client after BEGIN,
 * or a drizzle transaction), so the domain write and its events commit or roll back together; a
 * pool also works and then commits the message on its own.
 */
export function defineOutbox<const T extends TopicSchemas>(options: OutboxOptions<T>): Outbox<T> {
  const { topics, strict, maxBytes } = checkOptions(options);
  const schemaOf = (topic: unknown, path: string, issues: PublishIssue[]) => {
    if (typeof topic === 'string' && Object.hasOwn(topics, topic)) return topics[topic];
    if (strict && typeof topic === 'string') {
      issues.push({
        path: `${path}.topic`,
        message: `"${topic}" is not a topic of this outbox (${Object.keys(topics).join(', ')})`,
      });
    }
    return undefined;
  };
  return {
    publish: async (tx, message) =>
      (await write(tx, [message], maxBytes, schemaOf, 'message'))[0] as string,
    publishMany: (tx, messages) => write(tx, messages, maxBytes, schemaOf, 'messages'),
  };
}

/**
 * The options, checked when the outbox is defined: a `maxPayloadBytes` of NaN compared false with
 * every size, so payloads over any broker's limit were written and went dead at delivery, and a
 * missing `topics` or a schema without `~standard` failed only at `publish` with a TypeError that
 * named neither (found by an audit). The topics are copied: one added later is not unchecked.
 */
function checkOptions<T extends TopicSchemas>(options: OutboxOptions<T>) {
  const bad = (what: string) => new ConfigError(`defineOutbox: ${what}`);
  const given: unknown = options?.topics;
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    throw bad('topics must be an object of a Standard Schema per topic name ({} for none)');
  }
  for (const [topic, schema] of Object.entries(given)) {
    // None: a topic of the outbox whose payloads are not checked.
    if (schema === undefined || schema === null) continue;
    if (
      typeof (schema as Partial<StandardSchemaV1> | null)?.['~standard']?.validate !== 'function'
    ) {
      throw bad(`topics["${topic}"] must be a Standard Schema (a zod, valibot or arktype schema)`);
    }
  }
  const maxBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
  if (maxBytes !== Infinity && (!Number.isSafeInteger(maxBytes) || maxBytes < 1)) {
    throw bad(
      `maxPayloadBytes must be a whole number of bytes above 0 (or Infinity), got ${String(maxBytes)}`,
    );
  }
  const strict = options.strictTopics ?? true;
  if (typeof strict !== 'boolean') throw bad('strictTopics must be true or false');
  return { topics: { ...(given as T) }, strict, maxBytes };
}

/** Writes one message with no schema; see {@link defineOutbox}. */
export async function publish(tx: Queryable, message: MessageInput): Promise<string> {
  return (
    await write(tx, [message], DEFAULT_MAX_PAYLOAD_BYTES, () => undefined, 'message')
  )[0] as string;
}

/** Writes messages with no schema in one statement; see {@link defineOutbox}. */
export function publishMany(tx: Queryable, messages: readonly MessageInput[]): Promise<string[]> {
  return write(tx, messages, DEFAULT_MAX_PAYLOAD_BYTES, () => undefined, 'messages');
}

async function write(
  tx: Queryable,
  messages: readonly MessageInput[],
  maxBytes: number,
  schemaOf: (topic: unknown, path: string, issues: PublishIssue[]) => StandardSchemaV1 | undefined,
  root: 'message' | 'messages',
): Promise<string[]> {
  if (!Array.isArray(messages)) {
    throw new InvalidMessageError([{ path: root, message: 'must be an array of messages' }]);
  }
  if (messages.length > MAX_BATCH) {
    throw new InvalidMessageError([
      { path: root, message: `holds ${messages.length} messages, more than ${MAX_BATCH} per call` },
    ]);
  }
  if (messages.length === 0) return [];
  const issues: PublishIssue[] = [];
  const checked: CheckedMessage[] = [];
  for (const [i, message] of messages.entries()) {
    const path = root === 'message' ? 'message' : `messages[${i}]`;
    const schema = schemaOf((message as { topic?: unknown } | null)?.topic, path, issues);
    const ok = await checkMessage(message, path, schema, maxBytes, issues);
    if (ok) checked.push(ok);
  }
  if (issues.length > 0) throw new InvalidMessageError(issues);
  const { rows } = await runSql<{ ids: string[] }>(
    tx,
    insertMessages(
      checked.map((m) => m.topic),
      checked.map((m) => m.key),
      checked.map((m) => m.payloadJson),
      checked.map((m) => m.headersJson),
    ),
  );
  return rows[0]?.ids ?? [];
}
