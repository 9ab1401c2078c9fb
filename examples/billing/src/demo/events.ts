import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { tcpAnswers } from '@skiplock/devdb';
import { createRelay, outboxCounts, type Relay, type Sink } from '@skiplock/outbox';
import { ensureStream, natsSink } from '@skiplock/outbox/nats';
import { webhookSink } from '@skiplock/outbox/webhook';
import type { Logger } from '@skiplock/queue';
import type pg from 'pg';
import { Webhook } from 'standardwebhooks';
import type { BillingTopic } from '../events.js';

/** What a consumer downstream of the relay saw. */
export interface EventReport {
  /** Where the relay delivered: `NATS JetStream` or, without a NATS server, a local webhook. */
  sink: string;
  /** Outbox messages the relay marked delivered, and those still waiting. */
  delivered: number;
  pending: number;
  dead: number;
  /** Events the consumer received, by topic, each counted once per message id. */
  seen: Record<BillingTopic, number>;
  /** Paid invoices in the billing tables, and those with not exactly one `invoice.paid` seen. */
  paidInvoices: number;
  paidNotSeenOnce: string[];
}

export interface EventPipeline {
  readonly sink: string;
  /** Waits (up to `timeoutMs`) for the relay to deliver everything, then reads the consumer. */
  report(pool: pg.Pool, timeoutMs?: number): Promise<EventReport>;
  close(): Promise<void>;
}

interface Consumer {
  /** Message ids seen per invoice and topic. */
  read(): Promise<{ id: string; topic: string; invoiceId: string }[]>;
  close(): Promise<void>;
}

/**
 * The billing events leave PostgreSQL through a relay in the demo's own process: to NATS
 * JetStream when a server answers at NATS_URL (127.0.0.1:4222 by default), into a stream of this
 * run's own, read back by a JetStream consumer; otherwise to a webhook receiver in this process
 * that checks each Standard Webhooks signature, so the demo runs on a machine with only Node.
 */
export async function startEventPipeline(options: {
  connectionString: string;
  /** Names this run's stream and subjects, so runs side by side never mix. */
  runName: string;
  logger: Logger;
}): Promise<EventPipeline> {
  const natsUrl = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
  const nats = (await tcpAnswers(natsUrl, 4222))
    ? await natsPipeline(natsUrl, options.runName)
    : null;
  const { sink, consumer, name } = nats ?? (await webhookPipeline());
  const relay: Relay = createRelay({
    connectionString: options.connectionString,
    sink,
    logger: options.logger,
    pollIntervalMs: 500,
  });
  relay.start();
  return {
    sink: name,
    async report(pool, timeoutMs = 15_000) {
      const deadline = Date.now() + timeoutMs;
      let counts = await outboxCounts(pool);
      while (counts.pending > 0 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        counts = await outboxCounts(pool);
      }
      const events = await consumer.read();
      const seen: Record<BillingTopic, number> = {
        'invoice.issued': 0,
        'invoice.paid': 0,
        'invoice.voided': 0,
      };
      const paidSeen = new Map<string, number>();
      for (const e of events) {
        if (e.topic in seen) seen[e.topic as BillingTopic] += 1;
        if (e.topic === 'invoice.paid')
          paidSeen.set(e.invoiceId, (paidSeen.get(e.invoiceId) ?? 0) + 1);
      }
      const { rows } = await pool.query<{ id: string }>(
        `SELECT id FROM billing.invoices WHERE status = 'paid'`,
      );
      const paidNotSeenOnce = rows.map((r) => r.id).filter((id) => paidSeen.get(id) !== 1);
      // An event for an invoice that is not paid is as wrong as a missing one.
      for (const id of paidSeen.keys()) {
        if (!rows.some((r) => r.id === id)) paidNotSeenOnce.push(id);
      }
      return {
        sink: name,
        delivered: counts.delivered,
        pending: counts.pending,
        dead: counts.dead,
        seen,
        paidInvoices: rows.length,
        paidNotSeenOnce,
      };
    },
    async close() {
      await relay.stop({ timeoutMs: 5_000 });
      await sink.close();
      await consumer.close();
    },
  };
}

async function natsPipeline(servers: string, runName: string) {
  const prefix = runName.replace(/[^A-Za-z0-9_-]/g, '_');
  const stream = `BILLING_${prefix}`;
  const nc: NatsConnection = await connect({ servers, name: 'billing-demo-consumer' });
  await ensureStream({ connection: nc, name: stream, subjects: [`${prefix}.>`] });
  const sink = natsSink({
    servers,
    subject: (message) => `${prefix}.${message.topic}`,
    msgIdPrefix: `${prefix}-`,
  });
  const consumer: Consumer = {
    async read() {
      const jsm = await jetstreamManager(nc);
      const total = (await jsm.streams.info(stream)).state.messages;
      const ordered = await jetstream(nc).consumers.get(stream);
      const events: { id: string; topic: string; invoiceId: string }[] = [];
      while (events.length < total) {
        const before = events.length;
        const batch = await ordered.fetch({ max_messages: total - events.length, expires: 5_000 });
        for await (const m of batch) {
          events.push({
            id: m.headers?.get('Nats-Msg-Id') ?? String(m.seq),
            topic: m.subject.slice(prefix.length + 1),
            invoiceId: (m.json() as { invoiceId: string }).invoiceId,
          });
        }
        if (events.length === before) break;
      }
      return events;
    },
    async close() {
      await (await jetstreamManager(nc)).streams.delete(stream).catch(() => false);
      await nc.close();
    },
  };
  return { sink, consumer, name: 'NATS JetStream' };
}

async function webhookPipeline(): Promise<{ sink: Sink; consumer: Consumer; name: string }> {
  const secret = `whsec_${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64')}`;
  const verifier = new Webhook(secret);
  // Keyed by webhook-id: a receiver de-duplicates re-deliveries on it.
  const received = new Map<string, { id: string; topic: string; invoiceId: string }>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      try {
        verifier.verify(body, req.headers as Record<string, string>);
      } catch {
        res.writeHead(401).end();
        return;
      }
      const envelope = JSON.parse(body) as { type: string; data: { invoiceId: string } };
      const id = String(req.headers['webhook-id']);
      received.set(id, { id, topic: envelope.type, invoiceId: envelope.data.invoiceId });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const sink = webhookSink({ url: `http://127.0.0.1:${port}/billing-events`, secret });
  return {
    sink,
    name: 'a local webhook receiver (no NATS server answered)',
    consumer: {
      read: async () => [...received.values()],
      close: () => new Promise<void>((resolve) => server.close(() => resolve())),
    },
  };
}
