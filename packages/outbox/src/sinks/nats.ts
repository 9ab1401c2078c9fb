import {
  jetstream,
  jetstreamManager,
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamClient,
  type StreamInfo,
} from '@nats-io/jetstream';
import {
  connect,
  errors,
  headers,
  nanos,
  type MsgHdrs,
  type NatsConnection,
} from '@nats-io/transport-node';
import { ConfigError } from '@skiplock/queue';
import { KEY_CONTROL } from '../validate.js';
import type { Logger } from 'pino';
import {
  encodePayload,
  failed,
  KEY_HEADER,
  TOPIC_HEADER,
  type Delivery,
  type OutboxMessage,
  type Sink,
} from '../sink.js';

export interface NatsSinkOptions {
  /** Where to connect when no `connection` is given; default `NATS_URL` or nats://127.0.0.1:4222. */
  servers?: string | string[] | undefined;
  /** The caller's connection: the sink publishes on it and `close()` leaves it open. */
  connection?: NatsConnection | undefined;
  /** The subject a message is published to; default its topic. */
  subject?: ((message: OutboxMessage) => string) | undefined;
  /**
   * Put before the outbox id to form the `Nats-Msg-Id`; default ''. Give each outbox that feeds
   * one stream its own prefix, or their ids collide in the stream's duplicate window.
   */
  msgIdPrefix?: string | undefined;
  /** How long to wait for each message's PubAck: whole ms from 1 to 3 600 000; default 5000. */
  ackTimeoutMs?: number | undefined;
  logger?: Logger | undefined;
}

export interface NatsSink extends Sink {
  readonly name: 'nats';
}

export { KEY_HEADER, TOPIC_HEADER } from '../sink.js';

const CONNECTION_NAME = 'skiplock-outbox';
/** An hour: longer is no timeout at all, and past 2^31-1 ms Node's timers misfire. */
const MAX_ACK_TIMEOUT_MS = 3_600_000;
const OK: Delivery = { ok: true };
const ABORTED = Symbol('aborted');
const abortedDelivery = failed('aborted before the stream acknowledged the message');
const abortedDisconnected = failed(
  'aborted before the stream acknowledged the message; the connection to NATS was lost',
  { unavailable: true },
);
/** Aborted before any publish of the batch started: its attempt is given back (`notSent`). */
const abortedUnsent = failed('aborted before the message was published', { notSent: true });

/**
 * A sink that publishes to NATS JetStream and counts a message delivered once the stream acked
 * it. The outbox id goes out as `Nats-Msg-Id`, so a batch replayed after a relay crash is
 * dropped by the stream's duplicate window (and acked as a duplicate, which is a success).
 */
export function natsSink(options: NatsSinkOptions): NatsSink {
  const {
    connection,
    subject = (message: OutboxMessage) => message.topic,
    msgIdPrefix = '',
    ackTimeoutMs = 5_000,
    logger,
  } = options;
  // Checked here: nats.js would reject each publish, and the failure would count as permanent;
  // and Node fires a timer of more than 2^31-1 ms (Infinity too) after 1 ms, failing every publish.
  if (!Number.isInteger(ackTimeoutMs) || ackTimeoutMs < 1 || ackTimeoutMs > MAX_ACK_TIMEOUT_MS)
    throw new ConfigError(
      `natsSink options: ackTimeoutMs must be an integer from 1 to ${MAX_ACK_TIMEOUT_MS}, got ${String(ackTimeoutMs)}`,
    );
  // Checked here too, for the same reason: a subject that is no function failed every publish,
  // and each failure spent an attempt until the messages went dead (found by an audit).
  if (typeof subject !== 'function') {
    throw new ConfigError(
      'natsSink options: subject must be a function of the message returning its subject',
    );
  }
  // The prefix goes out in a header line, as a key does: a control character would end or
  // corrupt it.
  if (typeof msgIdPrefix !== 'string' || KEY_CONTROL.test(msgIdPrefix)) {
    throw new ConfigError(
      'natsSink options: msgIdPrefix must be a string without control characters',
    );
  }
  let client: Promise<Client> | undefined;
  let closed = false;

  // Lazy, so that a relay starts without the broker up. A failed connect, or a connection that
  // closed for good (an auth error after a server change, say), is replaced on the next batch.
  const jetStream = async (): Promise<Client> => {
    if (!client) {
      const opening = (async () => {
        const nc = connection ?? (await open(options.servers));
        const link: Link = { down: false, drops: 0 };
        void watch(nc, link, logger);
        return { nc, js: jetstream(nc), link };
      })();
      client = opening;
      opening.catch(() => {
        if (client === opening) client = undefined;
      });
    }
    const current = client;
    const opened = await current;
    if (!connection && opened.nc.isClosed() && client === current) client = undefined;
    return opened;
  };

  const publish = async ({ nc, js, link }: Client, message: OutboxMessage): Promise<Delivery> => {
    const reserved = Object.keys(message.headers).find((name) => NATS_RESERVED.test(name));
    if (reserved !== undefined) {
      // JetStream reads `Nats-*` headers as instructions (`Nats-Expected-Last-Sequence` makes the
      // stream refuse the message, `Nats-Msg-Id` would fight the sink's own de-duplication id,
      // `Nats-Rollup` purges the subject): no retry can publish it as the producer meant.
      return failed(`message header "${reserved}" is reserved by NATS JetStream (Nats-*)`, {
        permanent: true,
      });
    }
    const drops = link.drops;
    try {
      // A PubAck with `duplicate: true` means the stream already holds the message: delivered.
      await js.publish(subject(message), encodePayload(message), {
        msgID: msgIdPrefix + message.id,
        headers: headersOf(message),
        timeout: ackTimeoutMs,
      });
      return OK;
    } catch (error) {
      const delivery = publishFailure(error, ackTimeoutMs);
      // The connection went down while the message waited for its PubAck (or was down when it
      // was published; nats.js holds publishes while it reconnects): the broker's outage, not
      // the message's fault. It is not charged even though the stream may have stored it before
      // the ack was lost: its retry carries the same Nats-Msg-Id, which the stream's duplicate
      // window drops, so charging it would only send messages dead for an outage. A JetStream
      // error for the message, or one no retry can fix, still counts.
      if (!delivery.ok && !delivery.permanent && !(error instanceof JetStreamApiError)) {
        // A closed connection of the sink's own is replaced next batch; a caller's is not (see
        // `deliver`), so its failures count.
        if (link.down || link.drops !== drops || (!connection && nc.isClosed()))
          return { ...delivery, unavailable: true };
      }
      return delivery;
    }
  };

  return {
    name: 'nats',

    async deliver(messages, signal) {
      if (messages.length === 0) return [];
      if (closed) return messages.map(() => failed('the NATS sink is closed'));
      if (signal.aborted) return messages.map(() => abortedUnsent);
      if (connection?.isClosed()) {
        // nats.js closes a connection for good after its reconnect attempts (10 by default,
        // about 20 s of outage), and the sink never replaces a caller's. Reported unavailable,
        // its messages waited for good, never dead, while nothing could recover (found in
        // review): they count attempts, and each batch says so.
        logger?.error(
          { reason: 'nats_connection_closed' },
          'the NATS connection given to the sink is closed; give the sink a live one (or none, so that it connects itself)',
        );
        return messages.map(() => failed('the NATS connection given to the sink is closed'));
      }
      // One listener for the batch: one per message would trip Node's listener-leak warning.
      let onAbort = () => {};
      const aborted = new Promise<typeof ABORTED>((resolve) => {
        onAbort = () => resolve(ABORTED);
        signal.addEventListener('abort', onAbort, { once: true });
      });
      try {
        let js: Client | typeof ABORTED;
        try {
          js = await Promise.race([jetStream(), aborted]);
        } catch (error) {
          logger?.warn(
            { reason: 'nats_connect_failed', error: errorText(error) },
            'could not connect to NATS; the batch is retried',
          );
          // Refused, unresolvable, or turned away at the handshake: nothing was sent, and the
          // relay waits out the outage rather than spend the messages' attempts on it.
          return messages.map(() => failed(error, { unavailable: true }));
        }
        // Aborted while connecting (a server that accepts the socket and stalls the handshake
        // outlasts the batch's deadline): nothing was published. Before, each message spent an
        // attempt and could go dead without ever being sent (audit).
        if (js === ABORTED) return messages.map(() => abortedUnsent);
        const ready = js;
        const drops = ready.link.drops;
        // An abort leaves its publishes running (nats.js cannot cancel a request) and drops their
        // acks; a message the stream stored regardless is a duplicate on its retry.
        const results = await Promise.all(
          messages.map((message) => Promise.race([publish(ready, message), aborted])),
        );
        const lost = ready.link.down || ready.link.drops !== drops;
        return results.map((result) =>
          result !== ABORTED ? result : lost ? abortedDisconnected : abortedDelivery,
        );
      } finally {
        signal.removeEventListener('abort', onAbort);
      }
    },

    async close() {
      closed = true;
      if (connection || !client) return;
      const pending = client;
      client = undefined;
      const nc = await pending.then(
        (c) => c.nc,
        () => undefined,
      );
      // Not drain(): every publish already awaited its ack, and while the broker is down drain()
      // rejects and leaves the connection reconnecting.
      if (nc && !nc.isClosed()) await nc.close();
    },
  };
}

export interface EnsureStreamOptions {
  /** The caller's connection, left open; without it one is opened to `servers` and closed. */
  connection?: NatsConnection | undefined;
  servers?: string | string[] | undefined;
  name: string;
  subjects: string[];
  /**
   * How long the stream remembers message ids to drop replays; default 600 000 (10 min). A replay
   * can come as late as the relay's longest backoff plus its lease (5 min + 30 s by default): a
   * message whose ack was lost is retried then, and the window must still hold its id.
   */
  duplicateWindowMs?: number | undefined;
}

/**
 * Creates the stream, or updates its subjects and duplicate window. The window must outlast the
 * longest time a relay may take to re-deliver a batch (its lease), or a replay is stored twice.
 */
export async function ensureStream(options: EnsureStreamOptions): Promise<StreamInfo> {
  const { name, subjects, duplicateWindowMs = 600_000 } = options;
  const nc = options.connection ?? (await open(options.servers));
  try {
    const jsm = await jetstreamManager(nc);
    const config = { subjects, duplicate_window: nanos(duplicateWindowMs) };
    try {
      await jsm.streams.info(name);
    } catch (error) {
      if (!(error instanceof JetStreamApiError && error.code === JetStreamApiCodes.StreamNotFound))
        throw error;
      return await jsm.streams.add({ name, storage: 'file', ...config });
    }
    return await jsm.streams.update(name, config);
  } finally {
    if (!options.connection) await nc.close();
  }
}

/** A connection, its JetStream client, and what the sink saw of the connection's state. */
interface Client {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly link: Link;
}

interface Link {
  /** Disconnected now (nats.js is reconnecting). */
  down: boolean;
  /** Disconnections seen so far: one that came and went during a publish still counts. */
  drops: number;
}

async function open(servers: string | string[] | undefined): Promise<NatsConnection> {
  const nc = await connect({
    servers: servers ?? process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
    name: CONNECTION_NAME,
    // Never give up: a broker restart or failover is ridden out, and publishes meanwhile fail
    // by their ack timeout, so the relay retries them.
    maxReconnectAttempts: -1,
    // Without it the client builds a RequestError and a TimeoutError, stack traces and all, for
    // every publish, to enrich errors this sink reduces to their message (the same classes either
    // way): 21 % of the relay process's profile samples in the relay benchmark to NATS.
    noAsyncTraces: true,
  });
  return nc;
}

/**
 * Follows the connection's state for `link` and logs its changes; ends when the connection closes.
 * A caller's connection is followed too: nats.js gives each `status()` its own iterator.
 */
async function watch(nc: NatsConnection, link: Link, logger?: Logger): Promise<void> {
  for await (const status of nc.status()) {
    switch (status.type) {
      case 'disconnect':
        link.down = true;
        link.drops += 1;
        logger?.warn(
          { reason: 'nats_disconnect', server: status.server },
          'NATS connection lost; reconnecting',
        );
        break;
      case 'reconnect':
        link.down = false;
        logger?.info({ reason: 'nats_reconnect', server: status.server }, 'NATS reconnected');
        break;
      case 'ldm':
        logger?.warn(
          { reason: 'nats_lame_duck', server: status.server },
          'NATS server entering lame duck mode',
        );
        break;
      case 'staleConnection':
        logger?.warn({ reason: 'nats_stale_connection' }, 'NATS connection stale');
        break;
      case 'error':
        logger?.warn({ reason: 'nats_error', error: errorText(status.error) }, 'NATS error');
        break;
    }
  }
}

/** Header names JetStream reads as instructions. */
const NATS_RESERVED = /^nats-/i;

function headersOf(message: OutboxMessage): MsgHdrs {
  const h = headers();
  for (const [name, value] of Object.entries(message.headers)) h.set(name, value);
  h.set(TOPIC_HEADER, message.topic);
  if (message.key !== null) h.set(KEY_HEADER, message.key);
  return h;
}

function publishFailure(error: unknown, ackTimeoutMs: number): Delivery {
  // nats.js reports "no responders" as "jetstream is not enabled"; nearly always it is a subject
  // no stream takes yet, which an operator can fix, so the message waits for a retry.
  const cause = error instanceof Error ? error.cause : undefined;
  if (cause instanceof errors.RequestError && cause.isNoResponders())
    return failed('no JetStream stream takes the subject (no responders)');
  if (error instanceof errors.TimeoutError)
    return failed(`no PubAck within ${ackTimeoutMs} ms (broker down or slow)`);
  // An invalid subject or header name, or a payload over the server's max_payload: no retry
  // can publish it.
  if (error instanceof errors.InvalidSubjectError || error instanceof errors.InvalidArgumentError)
    return failed(error, { permanent: true });
  return failed(error);
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
