import { randomUUID } from 'node:crypto';
import { jetstream, jetstreamManager, type JsMsg } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';

/** A unique stream and subject prefix per test, so runs and tests never see each other's data. */
export function streamNames() {
  const tag = randomUUID().replaceAll('-', '').slice(0, 12);
  return { stream: `OUTBOX_TEST_${tag}`, prefix: `outbox-test.${tag}` };
}

/** Every message of the stream, in stream order, through an ordered consumer. */
export async function readStream(nc: NatsConnection, stream: string): Promise<JsMsg[]> {
  const jsm = await jetstreamManager(nc);
  const expected = (await jsm.streams.info(stream)).state.messages;
  const consumer = await jetstream(nc).consumers.get(stream);
  const read: JsMsg[] = [];
  while (read.length < expected) {
    const before = read.length;
    const messages = await consumer.fetch({ max_messages: expected - read.length, expires: 5_000 });
    for await (const m of messages) read.push(m);
    if (read.length === before) throw new Error(`read ${read.length} of ${expected} messages`);
  }
  return read;
}
