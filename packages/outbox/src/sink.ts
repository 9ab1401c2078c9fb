/**
 * One outbox message as a relay hands it to a sink. The relay never hands a sink two messages of
 * one key at once, and a key's messages arrive in the order they were published.
 */
export interface OutboxMessage {
  /**
   * The outbox row's id (a decimal string: it is a bigint). The same for every delivery attempt
   * of the message, so a sink uses it as the broker's message id and the broker's
   * de-duplication removes a re-delivery after a relay crash.
   */
  readonly id: string;
  readonly topic: string;
  /** Messages with the same key are delivered one at a time, in publish order; null: no order. */
  readonly key: string | null;
  /** The published payload, a JSON value (as stored). */
  readonly payload: unknown;
  readonly headers: Readonly<Record<string, string>>;
  /** 1 on the first delivery attempt. */
  readonly attempt: number;
  /** When the publishing transaction wrote it (the database's clock). */
  readonly createdAt: Date;
}

/** What became of one message in a sink. */
export type Delivery =
  | { readonly ok: true }
  | {
      readonly ok: false;
      /** Why, short, for the message's `last_error` and the relay's log (never the payload). */
      readonly error: string;
      /**
       * More, for `last_error` only and never logged: what the receiver said (the start of an
       * HTTP response body, which may echo the request).
       */
      readonly detail?: string | undefined;
      /**
       * The sink never sent it (the batch's deadline came first): the attempt does not count
       * and the message is due again at once.
       */
      readonly notSent?: boolean | undefined;
      /**
       * The broker could not be reached, or the connection to it was lost before it answered for
       * this message: the broker's outage, not the message's fault (a broker's verdict on the
       * message, a nack or a refusal, is not this). The attempt does not count and the message
       * never goes dead for it; it is due again after the relay's outage backoff, which grows
       * while batches keep failing so and resets at the next delivery. Takes precedence over
       * `notSent` and `permanent`.
       */
      readonly unavailable?: boolean | undefined;
      /** True when retrying cannot help (an HTTP 400, say): the message goes dead at once. */
      readonly permanent?: boolean | undefined;
      /** The earliest moment to try again, from the receiver (`Retry-After`), in ms from now. */
      readonly retryAfterMs?: number | undefined;
    };

/**
 * Where a relay delivers messages. To write one (Kafka through its client library is a sink of
 * exactly this shape): publish every message of the batch, wait until the broker has taken each
 * one for good (a publish ack, a publisher confirm, a 2xx), and resolve with one `Delivery` per
 * message, in the batch's order. Publish with `message.id` as the broker's message id where the
 * broker has one. A failure of one message is a `Delivery`; a throw fails the whole batch, and
 * every message in it is retried. `signal` aborts when the relay's deadline for the batch passes
 * (before the batch's lease could run out) or the relay stops without waiting; then answer at once
 * (within a second, or a quarter of the lease when that is shorter), each message not published
 * `notSent`, or the relay fails the whole batch and every message in it counts an attempt.
 * A message that failed because the broker could not be reached (a refused or failed connect) or
 * the connection was lost before the broker answered for it is `unavailable`: it keeps its
 * attempt, and the relay backs off as a whole instead of retrying against a broker that is down.
 * Mark only that: a message that itself makes the broker drop the connection would otherwise be
 * retried for good.
 */
export interface Sink {
  /** Names the sink in logs: `nats`, `rabbitmq`, `webhook`. */
  readonly name: string;
  deliver(messages: readonly OutboxMessage[], signal: AbortSignal): Promise<Delivery[]>;
  /** Releases connections the sink opened itself; a relay never calls it. */
  close(): Promise<void>;
}

/** Header names sinks add beside the message's own headers (webhooks carry both in the body). */
export const TOPIC_HEADER = 'skiplock-topic';
export const KEY_HEADER = 'skiplock-key';

/** The bytes a sink sends as the message body: the payload as JSON. */
export function encodePayload(message: OutboxMessage): Buffer {
  return Buffer.from(JSON.stringify(message.payload));
}

/** A failed delivery from anything thrown, keeping only the message of the error. */
export function failed(
  error: unknown,
  extra: {
    permanent?: boolean;
    retryAfterMs?: number;
    detail?: string;
    notSent?: boolean;
    unavailable?: boolean;
  } = {},
): Delivery {
  const text = error instanceof Error ? error.message : String(error);
  return { ok: false, error: text.slice(0, 1_000), ...extra };
}
