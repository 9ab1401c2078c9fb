import type { Sink } from '@skiplock/outbox';

/** What every relay benchmark message carries: its index and, when timed, the wall-clock send time. */
export interface EventPayload {
  i: number;
  t: number;
}

/** One message as the benchmark publishes it, relayed or straight to the broker. */
export interface BenchEvent {
  /** The outbox id it has (or would have): the broker's message id either way. */
  id: string;
  topic: string;
  key: string | null;
  payload: EventPayload;
}

/** How the results name each broker (the relay scenario's configs, the targets). */
export const brokerLabels = { nats: 'NATS JetStream', rabbitmq: 'RabbitMQ' } as const;

/** The topic of every measured message; the stream (or the queue's binding) takes only this one. */
export const TOPIC = 'bench.event';
/** A topic no stream or queue takes: a warm-up publish opens connections and stores nothing. */
export const WARMUP_TOPIC = 'bench.warmup';

/** The broker's client publishing with no database in between: the relay's ceiling. */
export interface DirectPublisher {
  /** Publishes every event at once and resolves when the broker has acknowledged each one. */
  publish(events: readonly BenchEvent[]): Promise<void>;
  close(): Promise<void>;
}

export interface Consumer {
  close(): Promise<void>;
}

/**
 * A broker the outbox relays to. Every run makes its own stream (or exchange and queue) named
 * after `tag` and removes it afterwards, so runs never see each other's messages or duplicate
 * windows.
 */
export interface Broker {
  id: 'nats' | 'rabbitmq';
  /** How the results name it: `NATS JetStream`, `RabbitMQ`. */
  label: string;
  /** Where it is expected, without credentials (for a skipped run's reason). */
  where: string;
  /** Whether something accepts TCP connections there within 1 s. */
  answers(): Promise<boolean>;
  /** The server's name and version, as the server reports it. */
  version(): Promise<string>;
  /** The broker's process name in /proc, for its CPU time. */
  processName: string;
  create(tag: string): Promise<void>;
  remove(tag: string): Promise<void>;
  /** The outbox's own sink for this broker, as an application would configure it. */
  sink(tag: string): Sink;
  publisher(tag: string): Promise<DirectPublisher>;
  /** Consumes the run's messages as they arrive, from a connection of its own. */
  consumer(tag: string, onPayload: (payload: EventPayload) => void): Promise<Consumer>;
}

/** Message `i` of a run: the same id, key and body whether it goes through the outbox or not. */
export function benchEvent(i: number, keys: number, t = 0): BenchEvent {
  return { id: String(i + 1), topic: TOPIC, key: `k${i % keys}`, payload: { i, t } };
}
