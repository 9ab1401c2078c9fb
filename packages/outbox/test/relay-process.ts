/**
 * One outbox relay as a real OS process, relaying to NATS JetStream, for the crash test that
 * SIGKILLs relays mid-batch. Configured by environment: DATABASE_URL and NATS_URL, RELAY_TOPIC
 * (the topic it relays), RELAY_MSG_ID_PREFIX, RELAY_LEASE_MS (1500), RELAY_STALL_MS (100: how
 * long it waits between the broker's acks and its settle, which widens the window where a kill
 * leaves messages published but not marked). Logs pino JSON lines on stdout: `relay_ready`, and
 * `test_delivered` after each batch the broker acknowledged.
 */
import { createRelay, type Sink } from '../src/index.js';
import { natsSink } from '../src/sinks/nats.js';
import { pino } from 'pino';

const logger = pino({ level: 'info', base: { pid: process.pid } });
const topic = process.env.RELAY_TOPIC;
if (!topic || !process.env.DATABASE_URL)
  throw new Error('outbox-relay-process: set RELAY_TOPIC and DATABASE_URL');
const stallMs = Number(process.env.RELAY_STALL_MS ?? 100);

const nats = natsSink({ msgIdPrefix: process.env.RELAY_MSG_ID_PREFIX ?? '', logger });
const sink: Sink = {
  name: nats.name,
  async deliver(messages, signal) {
    const deliveries = await nats.deliver(messages, signal);
    logger.info({ reason: 'test_delivered', count: messages.length }, 'batch acknowledged');
    await new Promise((resolve) => setTimeout(resolve, stallMs));
    return deliveries;
  },
  close: () => nats.close(),
};

const relay = createRelay({
  connectionString: process.env.DATABASE_URL,
  sink,
  topics: [topic],
  batchSize: 50,
  concurrency: 2,
  leaseMs: Number(process.env.RELAY_LEASE_MS ?? 1_500),
  pollIntervalMs: 200,
  logger,
});
relay.start();
logger.info({ reason: 'relay_ready' }, 'relay running');

process.once('SIGTERM', () => {
  void relay
    .stop()
    .then(() => sink.close())
    .then(() => process.exit(0));
});
