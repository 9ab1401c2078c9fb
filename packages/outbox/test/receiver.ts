import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll } from 'vitest';
import { Webhook } from 'standardwebhooks';

export const secret = `whsec_${Buffer.from('skiplock-outbox-test-secret-key!').toString('base64')}`;

export interface Received {
  /** The `webhook-id`: the same on every attempt of one message. */
  id: string;
  type: string;
  data: unknown;
  /** Whether the signature checked out with the shared secret. */
  verified: boolean;
  at: number;
}

export interface Reply {
  status: number;
  headers?: Record<string, string>;
  /** Answer this late (a slow or hung receiver). */
  delayMs?: number;
}

export interface Receiver {
  url: string;
  /** Every request, in arrival order, whatever was answered. */
  requests: Received[];
  /** Requests answered 2xx: deliveries that counted. */
  accepted: Received[];
  respond: (fn: (request: Received, nth: number) => Reply) => void;
}

/** A real HTTP webhook receiver on loopback that verifies Standard Webhooks signatures. */
export async function startReceiver(): Promise<Receiver> {
  const verifier = new Webhook(secret);
  const requests: Received[] = [];
  const accepted: Received[] = [];
  const attempts = new Map<string, number>();
  let decide: (request: Received, nth: number) => Reply = () => ({ status: 200 });
  const server: Server = createServer((req, res) => {
    void body(req).then(async (raw) => {
      let verified = true;
      try {
        verifier.verify(raw, req.headers as Record<string, string>);
      } catch {
        verified = false;
      }
      const envelope = JSON.parse(raw) as { type: string; data: unknown };
      const id = String(req.headers['webhook-id']);
      const request = { id, type: envelope.type, data: envelope.data, verified, at: Date.now() };
      requests.push(request);
      const nth = (attempts.get(id) ?? 0) + 1;
      attempts.set(id, nth);
      const reply = verified ? decide(request, nth) : { status: 401 };
      if (reply.delayMs) await new Promise((r) => setTimeout(r, reply.delayMs));
      if (reply.status >= 200 && reply.status < 300) accepted.push(request);
      res.writeHead(reply.status, reply.headers).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    requests,
    accepted,
    respond: (fn) => {
      decide = fn;
    },
  };
}

async function body(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
