import { connect, type ChannelModel, type ConfirmChannel, type Message } from 'amqplib';
import type { Logger } from 'pino';
import { ConfigError } from '@skiplock/queue';
import {
  encodePayload,
  failed,
  KEY_HEADER,
  type Delivery,
  type OutboxMessage,
  type Sink,
} from '../sink.js';

export interface RabbitMqSinkOptions {
  /** Default: `AMQP_URL`, else `amqp://guest:guest@127.0.0.1:5672`. */
  url?: string | undefined;
  exchange: string;
  /** When given, the sink declares the exchange (durable) on every channel it opens. */
  exchangeType?: 'topic' | 'direct' | 'fanout' | 'headers' | undefined;
  /** Default: the message's topic. */
  routingKey?: ((message: OutboxMessage) => string) | undefined;
  /** Put before the outbox id in `messageId`, to tell apart outboxes that share a broker. */
  messageIdPrefix?: string | undefined;
  /**
   * Publish as mandatory (default true): a message no queue is bound for comes back from the
   * broker and its delivery fails (retryable) instead of being confirmed and dropped. Set false
   * for an exchange where dropping unroutable messages is intended.
   */
  mandatory?: boolean | undefined;
  /** Shown to operators as the connection's name (`connection_name`). Default `skiplock-outbox`. */
  connectionName?: string | undefined;
  logger?: Logger | undefined;
}

export interface RabbitMqSink extends Sink {
  readonly name: 'rabbitmq';
}

/** A connection that hangs while opening (a black-holed host) fails the batch after this. */
const connectTimeoutMs = 10_000;
/** How long close() waits for the broker's close handshake before ending the socket. */
const closeTimeoutMs = 5_000;
/** AMQP routing keys are short strings; a longer one would corrupt the frame, not just fail. */
const maxRoutingKeyBytes = 255;

/** One confirm channel and what the sink tracks about it. */
interface Link {
  readonly channel: ConfirmChannel;
  readonly connection: Connection;
  /** False once the channel closed: it publishes no more. */
  open: boolean;
  /** The channel error that closed it (404 for a missing exchange), if one did. */
  error?: string | undefined;
  /** Message ids the broker returned as unroutable, each until its confirm arrives. */
  readonly returned: Map<string, string>;
}

interface Connection {
  readonly model: ChannelModel;
  /** Why it closed; set once it did. */
  lost?: string | undefined;
  /**
   * Why the broker blocks its publishes (a memory or disk alarm: `connection.blocked`), while it
   * does; undefined once unblocked.
   */
  blocked?: string | undefined;
  /** How many times the broker has blocked it, so a delivery knows whether a block overlapped it. */
  blocks: number;
}

/**
 * A broker under a resource alarm takes publishes but neither routes nor confirms them until the
 * alarm clears: the broker's outage, not the message's fault. Each message a blocked connection
 * left unconfirmed at the batch's deadline was charged an attempt, and a long alarm sent messages
 * dead (a known gap until a test raised a real disk alarm).
 */
function blockedDelivery(conn: Connection, sent: boolean): Delivery {
  return failed(`broker blocks publishing (${conn.blocked ?? 'blocked, since unblocked'})`, {
    unavailable: true,
    notSent: !sent,
  });
}

/** Why a channel closed, for the failures of its unconfirmed messages. */
function lostReason(link: Link): string {
  return link.error ?? link.connection.lost ?? 'channel closed';
}

/**
 * A message failed by its channel's close. A lost connection (the broker down or restarting, an
 * operator's close, the network) is not the message's fault: `unavailable`, whether the message
 * went out or not. That covers one published whose confirm was lost with the connection: the
 * broker may hold it, but its retry carries the same `messageId` for consumers to drop, and
 * charging it would send messages dead for an outage. A channel error on a live connection (a
 * missing exchange: 404; a message over the broker's size limit: 406) is the broker's verdict on
 * what was published: those messages count an attempt, and the ones the loop had not sent yet
 * are `notSent`.
 */
function lostDelivery(link: Link, sent: boolean): Delivery {
  const reason = lostReason(link);
  if (link.connection.lost !== undefined || link.error === undefined)
    return failed(reason, { unavailable: true });
  return failed(reason, sent ? {} : { notSent: true });
}

/** A failure to open the connection, or one lost while opening the channel: nothing was sent. */
class Unreachable extends Error {
  constructor(cause: unknown) {
    super(errorText(cause), { cause });
    this.name = 'Unreachable';
  }
}

const exchangeTypes = new Set(['topic', 'direct', 'fanout', 'headers']);

/**
 * Checked before any connection: amqplib took a missing `exchange` for the default exchange, so
 * messages went, confirmed, to queues named after their topics; an unknown `exchangeType`
 * closed the channel at every batch; a `routingKey` that is no function failed every publish.
 * Each such failure spent an attempt until the messages went dead (found by an audit).
 */
function checkOptions(url: string, options: RabbitMqSinkOptions, routingKey: unknown): void {
  const bad = (what: string) => new ConfigError(`rabbitmqSink options: ${what}`);
  // Read as amqplib reads it (WHATWG URL: spaces around it trimmed, the scheme in any case).
  let protocol: string | null = null;
  try {
    protocol = new URL(url).protocol;
  } catch {
    // Not a URL at all: refused below.
  }
  if (protocol !== 'amqp:' && protocol !== 'amqps:') {
    throw bad('url must be an amqp:// or amqps:// URL');
  }
  if (typeof options.exchange !== 'string') {
    throw bad("exchange must be a string (give '' explicitly for the default exchange)");
  }
  if (options.exchangeType !== undefined && !exchangeTypes.has(options.exchangeType)) {
    throw bad(`exchangeType must be one of ${[...exchangeTypes].join(', ')}, or left out`);
  }
  if (typeof routingKey !== 'function') {
    throw bad('routingKey must be a function of the message returning its routing key');
  }
  for (const name of ['messageIdPrefix', 'connectionName'] as const) {
    const value = options[name];
    if (value !== undefined && typeof value !== 'string') throw bad(`${name} must be a string`);
  }
  if (options.mandatory !== undefined && typeof options.mandatory !== 'boolean') {
    throw bad('mandatory must be true or false');
  }
}

/**
 * A sink that publishes to a RabbitMQ exchange through a confirm channel: a delivery is ok only
 * once the broker has confirmed that message, so a crash or a lost connection never counts an
 * unconfirmed message as delivered. The relay retries failures; the stable `messageId` lets
 * consumers drop the duplicates that retrying after a lost confirm can produce.
 */
export function rabbitmqSink(options: RabbitMqSinkOptions): RabbitMqSink {
  // An empty AMQP_URL is taken for an unset one (amqplib read it as amqp://localhost).
  const url = options.url ?? (process.env.AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672');
  const { exchange, exchangeType, logger } = options;
  const routingKey = options.routingKey ?? ((message: OutboxMessage) => message.topic);
  const prefix = options.messageIdPrefix ?? '';
  const mandatory = options.mandatory ?? true;
  const connectionName = options.connectionName ?? 'skiplock-outbox';
  checkOptions(url, options, routingKey);
  const log = { sink: 'rabbitmq', url: redactUrl(url), exchange, connectionName };

  let connection: Connection | undefined;
  let link: Link | undefined;
  let opening: Promise<Link> | undefined;
  /** Whether a connection was opened before, so the next one is logged as a reconnect. */
  let hadConnection = false;
  let closed = false;

  async function openConnection(): Promise<Connection> {
    if (connection && !connection.lost) return connection;
    const reconnect = hadConnection;
    let model: ChannelModel;
    try {
      model = await connect(url, {
        timeout: connectTimeoutMs,
        clientProperties: { connection_name: connectionName },
      });
    } catch (error) {
      // Refused, timed out, or turned away at the handshake (credentials too): no connection,
      // no message sent, and the relay waits the outage out instead of charging them.
      throw new Unreachable(error);
    }
    const conn: Connection = { model, blocks: 0 };
    // Without an 'error' listener, an error event would throw out of amqplib's socket handler.
    model.on('error', (error: Error) => {
      conn.lost ??= error.message;
    });
    // An operator's close (320 CONNECTION_FORCED) comes only as the reason of 'close'.
    model.on('close', (error?: Error) => {
      conn.lost ??= error?.message ?? 'connection closed';
      if (!closed)
        logger?.warn(
          { ...log, reason: 'amqp_connection_lost', error: conn.lost },
          'AMQP connection lost',
        );
    });
    model.on('blocked', (blockReason: string) => {
      conn.blocked = blockReason || 'no reason given';
      conn.blocks += 1;
      logger?.warn({ ...log, reason: 'amqp_blocked', blockReason }, 'AMQP connection blocked');
    });
    model.on('unblocked', () => {
      conn.blocked = undefined;
      logger?.info({ ...log, reason: 'amqp_unblocked' }, 'AMQP connection unblocked');
    });
    hadConnection = true;
    connection = conn;
    logger?.info(
      { ...log, reason: reconnect ? 'amqp_reconnect' : 'amqp_connected' },
      reconnect ? 'AMQP reconnected' : 'AMQP connected',
    );
    return conn;
  }

  async function openLink(): Promise<Link> {
    const conn = await openConnection();
    let channel: ConfirmChannel;
    try {
      channel = await conn.model.createConfirmChannel();
    } catch (error) {
      throw conn.lost === undefined ? error : new Unreachable(error);
    }
    const opened: Link = { channel, connection: conn, open: true, returned: new Map() };
    // A channel error (a publish to a missing exchange: 404) closes only this channel; the next
    // deliver opens a new one on the same connection.
    channel.on('error', (error: Error) => {
      opened.error ??= error.message;
    });
    channel.on('close', () => {
      opened.open = false;
      // A lost connection closes its channels before it says why: log only the connection's loss.
      queueMicrotask(() => {
        if (!closed && !conn.lost)
          logger?.warn(
            { ...log, reason: 'amqp_channel_lost', error: lostReason(opened) },
            'AMQP channel closed',
          );
      });
    });
    // The broker sends basic.return before the confirm of the same message.
    channel.on('return', (message: Message) => {
      const id: unknown = message.properties.messageId;
      if (typeof id === 'string')
        opened.returned.set(
          id,
          `returned by the broker as unroutable (routing key "${message.fields.routingKey}")`,
        );
    });
    if (exchangeType) {
      try {
        await channel.assertExchange(exchange, exchangeType, { durable: true });
      } catch (error) {
        // An exchange of another type (406) is the broker's refusal; a lost connection is not.
        throw conn.lost === undefined ? error : new Unreachable(error);
      }
    }
    link = opened;
    return opened;
  }

  /** The live channel, opening it (and the connection) once for concurrent deliveries. */
  function usableLink(): Promise<Link> {
    if (link?.open) return Promise.resolve(link);
    opening ??= openLink().finally(() => {
      opening = undefined;
    });
    return opening;
  }

  async function deliver(
    messages: readonly OutboxMessage[],
    signal: AbortSignal,
  ): Promise<Delivery[]> {
    if (messages.length === 0) return [];
    if (closed) return messages.map(() => failed('rabbitmq sink is closed'));
    if (signal.aborted) return messages.map(() => failed(abortText(signal), { notSent: true }));

    let current: Link;
    try {
      current = await untilAborted(usableLink(), signal);
    } catch (error) {
      if (!signal.aborted)
        logger?.warn(
          { ...log, reason: 'amqp_connect_failed', error: errorText(error) },
          'AMQP connect failed',
        );
      return messages.map(() =>
        signal.aborted
          ? failed(abortText(signal), { notSent: true })
          : failed(error, { unavailable: error instanceof Unreachable }),
      );
    }

    // Blocked now: nothing published would be confirmed before the alarm clears. Not sent, so
    // the broker's buffer does not grow by what a relay would only send again.
    const conn = current.connection;
    if (conn.blocked !== undefined) return messages.map(() => blockedDelivery(conn, false));
    const blocksBefore = conn.blocks;

    const results: (Delivery | undefined)[] = messages.map(() => undefined);
    let unsettled = messages.length;
    let allSettled!: () => void;
    const settledPromise = new Promise<void>((resolve) => (allSettled = resolve));
    const settle = (index: number, delivery: Delivery) => {
      if (results[index]) return;
      results[index] = delivery;
      if (--unsettled === 0) allSettled();
    };
    // An unconfirmed message may still reach the broker; failing it only means it is sent again.
    // Messages the loop never reached were not sent: their attempts do not count.
    const sent = new Array<boolean>(messages.length).fill(false);
    // At the deadline, a message a block of the broker overlapped is the alarm's, not its own.
    const onAbort = () => {
      const blocked = conn.blocked !== undefined || conn.blocks !== blocksBefore;
      messages.forEach((_, i) =>
        settle(
          i,
          blocked
            ? blockedDelivery(conn, sent[i]!)
            : failed(abortText(signal), { notSent: !sent[i] }),
        ),
      );
    };
    signal.addEventListener('abort', onAbort, { once: true });
    if (signal.aborted) onAbort();

    try {
      for (const [i, message] of messages.entries()) {
        if (signal.aborted) break;
        // Reached after the channel closed (while waiting for a drain): never sent, so never
        // charged for the connection's loss (before, it counted an attempt).
        if (!current.open) {
          settle(i, lostDelivery(current, false));
          continue;
        }
        sent[i] = true;
        // False: amqplib is buffering what the socket cannot take; wait before adding more.
        if (!publish(current, message, (delivery) => settle(i, delivery)))
          await drained(current, signal);
      }
      await settledPromise;
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
    return results as Delivery[];
  }

  /** Publishes one message, `done` getting its outcome; false when the channel wants a drain. */
  function publish(current: Link, message: OutboxMessage, done: (d: Delivery) => void): boolean {
    const messageId = prefix + message.id;
    let key: string;
    try {
      key = routingKey(message);
    } catch (error) {
      done(failed(error));
      return true;
    }
    if (Buffer.byteLength(key) > maxRoutingKeyBytes) {
      done(failed(`routing key longer than ${maxRoutingKeyBytes} bytes`, { permanent: true }));
      return true;
    }
    const headers: Record<string, string> = { ...message.headers };
    if (message.key !== null) headers[KEY_HEADER] = message.key;
    try {
      return current.channel.publish(
        exchange,
        key,
        encodePayload(message),
        {
          persistent: true,
          mandatory,
          messageId,
          contentType: 'application/json',
          type: message.topic,
          timestamp: Math.floor(message.createdAt.getTime() / 1000),
          headers,
        },
        (error: unknown) => {
          const returned = current.returned.get(messageId);
          current.returned.delete(messageId);
          if (!error) done(returned === undefined ? { ok: true } : failed(returned));
          // A nack, or the channel closing. Deferred: amqplib fails unconfirmed messages before
          // the channel and connection report that (and why) they closed.
          else
            queueMicrotask(() =>
              done(current.open ? failed('nacked by the broker') : lostDelivery(current, true)),
            );
        },
      );
    } catch (error) {
      // A closed channel throws; anything else is about this message (headers too large).
      const channelGone = !current.open || isIllegalOperation(error);
      done(channelGone ? lostDelivery(current, false) : failed(error, { permanent: true }));
      return true;
    }
  }

  async function close(): Promise<void> {
    closed = true;
    const pending = opening;
    if (pending) await pending.catch(() => undefined);
    const current = link;
    const conn = connection;
    link = undefined;
    connection = undefined;
    if (!conn || conn.lost) return;
    // A blocked connection's socket is not read by the broker until its alarm clears, so the
    // close handshake waited that long: close() hung for the whole of a disk alarm (found with
    // one). Then, and for a close that does not finish in time, the socket is simply ended.
    if (conn.blocked === undefined) {
      const graceful = (async () => {
        if (current?.open) await current.channel.close().catch(() => undefined);
        await conn.model.close().catch(() => undefined);
        return true;
      })();
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<false>((resolve) => {
        timer = setTimeout(() => resolve(false), closeTimeoutMs);
      });
      const done = await Promise.race([graceful, late]);
      clearTimeout(timer);
      if (done) return;
    }
    conn.lost ??= 'closed by the sink';
    destroySocket(conn.model);
  }

  return { name: 'rabbitmq', deliver, close };
}

/**
 * Ends a connection's socket without the close handshake. amqplib's typings do not name the
 * socket (`connection.stream`, there since its first releases); amqplib sees it end and emits
 * 'close', as for a broker gone.
 */
function destroySocket(model: ChannelModel): void {
  const socket = (model.connection as unknown as { stream?: { destroy(): void } }).stream;
  socket?.destroy();
}

/** Resolves when the channel can take more, closed, or the batch was aborted. */
function drained(current: Link, signal: AbortSignal): Promise<void> {
  if (!current.open || signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      current.channel.off('drain', done);
      current.channel.off('close', done);
      signal.removeEventListener('abort', done);
      resolve();
    };
    current.channel.on('drain', done);
    current.channel.on('close', done);
    signal.addEventListener('abort', done, { once: true });
  });
}

/** Rejects when the signal aborts, so a hanging connect does not hold the batch past its deadline. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new Error(abortText(signal)));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

function abortText(signal: AbortSignal): string {
  const reason: unknown = signal.reason;
  const detail = reason instanceof Error ? reason.message : reason ? String(reason) : '';
  return detail
    ? `aborted before the broker confirmed: ${detail}`
    : 'aborted before the broker confirmed';
}

function isIllegalOperation(error: unknown): boolean {
  return error instanceof Error && error.name === 'IllegalOperationError';
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The URL without its password, for logs. */
function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(unparsable url)';
  }
}
