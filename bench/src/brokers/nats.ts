import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import { KEY_HEADER, TOPIC_HEADER } from '@skiplock/outbox';
import { ensureStream, natsSink } from '@skiplock/outbox/nats';
import { pino } from 'pino';
import { answers, hostOf } from './answers.js';
import type { BenchEvent, Broker, EventPayload } from './types.js';
import { brokerLabels, TOPIC } from './types.js';

const url = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const logger = pino({ level: 'warn' });
/** The sink's default PubAck timeout, so both publish the same way. */
const ACK_TIMEOUT_MS = 5_000;

const streamOf = (tag: string) => `BENCH_RELAY_${tag}`;
const subjectOf = (tag: string, topic: string) => `bench-relay.${tag}.${topic}`;

async function withConnection<T>(work: (nc: NatsConnection) => Promise<T>): Promise<T> {
  const nc = await connect({ servers: url });
  try {
    return await work(nc);
  } finally {
    await nc.close();
  }
}

/** The headers the outbox's NATS sink sends with a message of these fields. */
function headersOf(event: BenchEvent) {
  const h = headers();
  h.set(TOPIC_HEADER, event.topic);
  if (event.key !== null) h.set(KEY_HEADER, event.key);
  return h;
}

/**
 * NATS JetStream: a file-backed stream per run (the outbox's `ensureStream`, 2-minute duplicate
 * window) taking one subject; every publish waits for the stream's PubAck.
 */
export const nats: Broker = {
  id: 'nats',
  label: brokerLabels.nats,
  where: hostOf(url),
  answers: () => answers(url, 4222),
  version: () => withConnection(async (nc) => `nats-server ${nc.info?.version ?? 'unknown'}`),
  processName: 'nats-server',
  async create(tag) {
    await ensureStream({ servers: url, name: streamOf(tag), subjects: [subjectOf(tag, TOPIC)] });
  },
  async remove(tag) {
    await withConnection(async (nc) => (await jetstreamManager(nc)).streams.delete(streamOf(tag)));
  },
  sink: (tag) =>
    natsSink({ servers: url, subject: (message) => subjectOf(tag, message.topic), logger }),
  async publisher(tag) {
    // The options the outbox's sink connects with (noAsyncTraces): the same client, the same work.
    const nc = await connect({ servers: url, name: 'skiplock-bench-direct', noAsyncTraces: true });
    const js = jetstream(nc);
    return {
      async publish(events) {
        await Promise.all(
          events.map((e) =>
            js.publish(subjectOf(tag, e.topic), Buffer.from(JSON.stringify(e.payload)), {
              msgID: e.id,
              headers: headersOf(e),
              timeout: ACK_TIMEOUT_MS,
            }),
          ),
        );
      },
      close: () => nc.close(),
    };
  },
  async consumer(tag, onPayload) {
    const nc = await connect({ servers: url, name: 'skiplock-bench-consumer' });
    // An ordered consumer: no acks, the client keeps pulls outstanding so a message comes as soon
    // as the stream has it.
    const consumer = await jetstream(nc).consumers.get(streamOf(tag));
    const messages = await consumer.consume({
      callback: (m) => onPayload(m.json<EventPayload>()),
    });
    return {
      async close() {
        await messages.close();
        await nc.close();
      },
    };
  },
};
