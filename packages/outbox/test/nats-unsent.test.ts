// A batch the NATS sink aborts before it published anything gives its attempts back (`notSent`),
// as the RabbitMQ and webhook sinks do. Found by an audit: a server that accepts the socket and
// stalls the handshake outlasted the batch's deadline, and each message spent an attempt it never
// made (with maxAttempts 1: dead, never sent).
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { createRelay, publishMany } from '../src/index.js';
import { natsSink } from '../src/sinks/nats.js';
import type { OutboxMessage } from '../src/sink.js';
import { useTestDatabase } from '../../../test/support/db.js';

const db = await useTestDatabase();
const silent = pino({ level: 'silent' });

// Accepts connections and never answers: a NATS server stuck at start-up, a half-open balancer.
const sockets: Socket[] = [];
const mute = createServer((socket) => {
  sockets.push(socket);
  socket.on('error', () => {});
});
await new Promise<void>((resolve) => mute.listen(0, '127.0.0.1', resolve));
const servers = `nats://127.0.0.1:${(mute.address() as AddressInfo).port}`;
afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise((resolve) => mute.close(resolve));
});

describe('the NATS sink aborted before it published', () => {
  it('says notSent for a batch whose signal already fired', async () => {
    const sink = natsSink({ servers });
    const message: OutboxMessage = {
      id: '1',
      topic: 't',
      key: 'k',
      payload: 1,
      headers: {},
      attempt: 1,
      createdAt: new Date(),
    };
    const [delivery] = await sink.deliver([message], AbortSignal.abort(new Error('deadline')));
    void sink.close();
    expect(delivery).toMatchObject({ ok: false, notSent: true });
  });

  it('gives the attempt back when the connection outlasts the batch deadline', async () => {
    const [id] = await publishMany(db.pool, [{ topic: 'unsent.nats', key: 'N', payload: 1 }]);
    const sink = natsSink({ servers });
    const relay = createRelay({
      pool: db.pool,
      sink,
      logger: silent,
      leaseMs: 2_000,
      maxAttempts: 1,
      topics: ['unsent.nats'],
    });
    await relay.runOnce();
    await relay.stop();
    void sink.close();
    const { rows } = await db.pool.query<{ status: string; attempts: number }>(
      `SELECT status::text, attempts FROM skiplock.outbox_messages WHERE id = $1`,
      [id],
    );
    expect(rows[0]).toEqual({ status: 'pending', attempts: 0 });
  });
});
