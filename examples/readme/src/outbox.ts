// Write an order and its event in one transaction, then relay the event to a signed webhook: the
// outbox README's first snippet, as a complete program.
// Run: DATABASE_URL=postgres://... npx tsx outbox.ts
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { Webhook } from 'standardwebhooks';
import { z } from 'zod';
import { createRelay, defineOutbox, migrate } from '@skiplock/outbox';
import { webhookSink } from '@skiplock/outbox/webhook';

const events = defineOutbox({
  topics: {
    'order.placed': z.object({ orderId: z.string(), totalCents: z.number().int().positive() }),
  },
});

const pool = new pg.Pool({ connectionString: process.env['DATABASE_URL'] });
await migrate({ pool });
await pool.query('CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, total_cents int)');

// The order and its event commit together, or neither does.
const tx = await pool.connect();
try {
  await tx.query('BEGIN');
  await tx.query('INSERT INTO orders VALUES ($1, $2) ON CONFLICT DO NOTHING', ['ord_1', 4200]);
  await events.publish(tx, {
    topic: 'order.placed',
    key: 'ord_1', // one key's events arrive one at a time, in publish order
    payload: { orderId: 'ord_1', totalCents: 4200 },
  });
  await tx.query('COMMIT');
} catch (error) {
  await tx.query('ROLLBACK');
  throw error;
} finally {
  tx.release();
}

// The receiving service: it checks the Standard Webhooks signature with the shared secret.
const secret = `whsec_${Buffer.from('32 bytes shared with the receiver').toString('base64')}`;
let delivered!: (line: string) => void;
const received = new Promise<string>((resolve) => (delivered = resolve));
const receiver = createServer((req, res) => {
  let body = '';
  req.on('data', (chunk: Buffer) => (body += chunk.toString()));
  req.on('end', () => {
    const event = new Webhook(secret).verify(body, req.headers as Record<string, string>);
    res.writeHead(204).end();
    delivered(`webhook ${String(req.headers['webhook-id'])}: ${JSON.stringify(event)} (verified)`);
  });
});
await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const { port } = receiver.address() as AddressInfo;

// The relay: claims events with SKIP LOCKED, delivers them, marks them delivered.
const sink = webhookSink({ url: `http://127.0.0.1:${port}/events`, secret });
const relay = createRelay({ pool, sink });
relay.start();
console.log(await received);
await relay.stop();
await sink.close(); // the relay never closes its sink (a NATS or AMQP one holds a connection)
receiver.close();
await pool.end();
