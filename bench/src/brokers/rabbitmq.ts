import { connect, type Channel, type ConfirmChannel } from 'amqplib';
import { KEY_HEADER } from '@skiplock/outbox';
import { rabbitmqSink } from '@skiplock/outbox/rabbitmq';
import { pino } from 'pino';
import { answers, hostOf } from './answers.js';
import type { BenchEvent, Broker, EventPayload } from './types.js';
import { brokerLabels, TOPIC } from './types.js';

const url = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const logger = pino({ level: 'warn' });

const exchangeOf = (tag: string) => `bench-relay-${tag}`;
const queueOf = (tag: string) => `bench-relay-${tag}`;

async function withChannel<T>(work: (channel: Channel, version: string) => Promise<T>): Promise<T> {
  const connection = await connect(url);
  try {
    const version = connection.connection.serverProperties.version ?? 'unknown';
    return await work(await connection.createChannel(), `RabbitMQ ${version}`);
  } finally {
    await connection.close();
  }
}

/** Publishes as the outbox's RabbitMQ sink does (same properties), `done` on its confirm. */
function publishOne(
  channel: ConfirmChannel,
  exchange: string,
  event: BenchEvent,
  done: (error: unknown) => void,
): boolean {
  return channel.publish(
    exchange,
    event.topic,
    Buffer.from(JSON.stringify(event.payload)),
    {
      persistent: true,
      mandatory: false,
      messageId: event.id,
      contentType: 'application/json',
      type: event.topic,
      timestamp: Math.floor(Date.now() / 1000),
      headers: event.key === null ? {} : { [KEY_HEADER]: event.key },
    },
    done,
  );
}

/**
 * RabbitMQ: a durable topic exchange per run and a durable classic queue bound to the measured
 * topic; messages are persistent and every publish waits for its publisher confirm.
 */
export const rabbitmq: Broker = {
  id: 'rabbitmq',
  label: brokerLabels.rabbitmq,
  where: hostOf(url),
  answers: () => answers(url, 5672),
  version: () => withChannel(async (_, version) => version),
  processName: 'beam.smp',
  async create(tag) {
    await withChannel(async (channel) => {
      await channel.assertExchange(exchangeOf(tag), 'topic', { durable: true });
      await channel.assertQueue(queueOf(tag), { durable: true });
      await channel.bindQueue(queueOf(tag), exchangeOf(tag), TOPIC);
    });
  },
  async remove(tag) {
    await withChannel(async (channel) => {
      await channel.deleteQueue(queueOf(tag));
      await channel.deleteExchange(exchangeOf(tag));
    });
  },
  sink: (tag) => rabbitmqSink({ url, exchange: exchangeOf(tag), logger }),
  async publisher(tag) {
    const connection = await connect(url, {
      clientProperties: { connection_name: 'skiplock-bench-direct' },
    });
    const channel = await connection.createConfirmChannel();
    const exchange = exchangeOf(tag);
    return {
      async publish(events) {
        const confirms: Promise<void>[] = [];
        for (const event of events) {
          let writable = true;
          confirms.push(
            new Promise<void>((resolve, reject) => {
              writable = publishOne(channel, exchange, event, (error) =>
                error ? reject(new Error('nacked or channel closed')) : resolve(),
              );
            }),
          );
          // As the sink does: wait while amqplib buffers what the socket cannot take.
          if (!writable) await new Promise((resolve) => channel.once('drain', resolve));
        }
        await Promise.all(confirms);
      },
      close: () => connection.close(),
    };
  },
  async consumer(tag, onPayload) {
    const connection = await connect(url, {
      clientProperties: { connection_name: 'skiplock-bench-consumer' },
    });
    const channel = await connection.createChannel();
    await channel.consume(
      queueOf(tag),
      (m) => {
        if (m) onPayload(JSON.parse(m.content.toString()) as EventPayload);
      },
      { noAck: true },
    );
    return { close: () => connection.close() };
  },
};
