import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError } from '@skiplock/queue';
import type { Delivery, OutboxMessage } from '../src/sink.js';
import { maxRetryAfterMs, parseRetryAfter } from '../src/sinks/retry-after.js';
import { webhookSink, type WebhookSinkOptions } from '../src/sinks/webhook.js';

const secret = `whsec_${randomBytes(32).toString('base64')}`;
const quiet = pino({ level: 'silent' });
const never = new AbortController().signal;

interface Received {
  method: string;
  path: string;
  headers: Record<string, string>;
  rawBody: Buffer;
  /** What the receiver's `Webhook.verify` said: null when the signature checked out. */
  verifyError: string | null;
}

type Respond = (request: Received, response: ServerResponse) => void;

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

function flatten(headers: IncomingHttpHeaders): Record<string, string> {
  const flat: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (typeof value === 'string') flat[name] = value;
    else if (Array.isArray(value)) flat[name] = value.join(', ');
  }
  return flat;
}

/** A real HTTP receiver on 127.0.0.1 that verifies every request as a webhook consumer would. */
async function receiver(respond: Respond) {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const rawBody = Buffer.concat(chunks);
      const headers = flatten(req.headers);
      let verifyError: string | null = null;
      try {
        new Webhook(secret).verify(rawBody, headers);
      } catch (error) {
        verifyError = String(error);
      }
      const request = { method: req.method!, path: req.url!, headers, rawBody, verifyError };
      received.push(request);
      respond(request, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  closers.push(close);
  return { base: `http://127.0.0.1:${port}`, received };
}

function message(id: string, overrides: Partial<OutboxMessage> = {}): OutboxMessage {
  return {
    id,
    topic: 'order.created',
    key: null,
    payload: { orderId: id, note: 'grüße ✓ 🎉' },
    headers: {},
    attempt: 1,
    createdAt: new Date('2025-01-02T03:04:05.678Z'),
    ...overrides,
  };
}

function sink(options: Partial<WebhookSinkOptions> & Pick<WebhookSinkOptions, 'url'>) {
  return webhookSink({ secret, logger: quiet, ...options });
}

function failure(delivery: Delivery | undefined) {
  expect(delivery?.ok).toBe(false);
  return delivery as Extract<Delivery, { ok: false }>;
}

describe('webhookSink delivery', () => {
  it('delivers a batch once each, signed, with the envelope and headers', async () => {
    const { base, received } = await receiver((request, res) => {
      res.writeHead(request.verifyError ? 401 : 204).end();
    });
    const webhook = sink({
      url: (m) => `${base}/hooks/${m.topic}`,
      idPrefix: 'evt_',
      headers: { authorization: 'Bearer static-token' },
    });
    const messages = ['1', '2', '3', '4', '5', '6'].map((id) =>
      message(id, {
        topic: id === '6' ? 'order.shipped' : 'order.created',
        headers: {
          'x-tenant': `tenant-${id}`,
          // Neither may replace what the sink sets itself or the operator's static headers.
          'webhook-id': 'forged',
          'Content-Type': 'text/plain',
          authorization: 'Bearer forged',
          // Framing and connection headers would break the request; the sink drops them.
          'content-length': '3',
          'transfer-encoding': 'chunked',
          connection: 'upgrade',
          upgrade: 'h2c',
        },
      }),
    );

    const results = await webhook.deliver(messages, never);

    expect(results).toEqual(messages.map(() => ({ ok: true })));
    expect(received).toHaveLength(messages.length);
    expect(received.map((r) => r.headers['webhook-id']).sort()).toEqual(
      messages.map((m) => `evt_${m.id}`).sort(),
    );
    for (const m of messages) {
      const request = received.find((r) => r.headers['webhook-id'] === `evt_${m.id}`)!;
      expect(request.verifyError).toBeNull();
      expect(request.method).toBe('POST');
      expect(request.path).toBe(`/hooks/${m.topic}`);
      expect(request.headers['content-type']).toBe('application/json');
      expect(request.headers['x-tenant']).toBe(`tenant-${m.id}`);
      expect(request.headers.authorization).toBe('Bearer static-token');
      expect(
        Math.abs(Number(request.headers['webhook-timestamp']) - Date.now() / 1_000),
      ).toBeLessThan(60);
      expect(JSON.parse(request.rawBody.toString('utf8'))).toEqual({
        type: m.topic,
        timestamp: '2025-01-02T03:04:05.678Z',
        data: m.payload,
      });
    }
    await expect(webhook.close()).resolves.toBeUndefined();
  });

  it('keeps at most `concurrency` requests in flight', async () => {
    let pending = 0;
    let most = 0;
    const { base } = await receiver((_request, res) => {
      most = Math.max(most, ++pending);
      setTimeout(() => {
        pending--;
        res.writeHead(200).end();
      }, 50);
    });
    const batch = (n: number) => Array.from({ length: n }, (_, i) => message(String(i + 1)));

    const results = await sink({ url: base, concurrency: 2 }).deliver(batch(6), never);

    expect(results.every((d) => d.ok)).toBe(true);
    expect(most).toBeLessThanOrEqual(2);
  });

  it('sends a batch in parallel by default', async () => {
    const held: ServerResponse[] = [];
    // Answers nothing until all five wait at once: a sink sending fewer in parallel times out.
    const { base } = await receiver((_request, res) => {
      held.push(res);
      if (held.length === 5) for (const r of held) r.writeHead(200).end();
    });
    const batch = Array.from({ length: 5 }, (_, i) => message(String(i + 1)));

    const results = await sink({ url: base, timeoutMs: 5_000 }).deliver(batch, never);

    expect(results).toEqual(batch.map(() => ({ ok: true })));
  });
});

describe('webhookSink outcomes', () => {
  it('retries 500, honours Retry-After on 429, then succeeds, with the same webhook-id', async () => {
    const answers: Respond[] = [
      (_r, res) => res.writeHead(500).end('database is down'),
      (_r, res) => res.writeHead(429, { 'retry-after': '2' }).end(),
      (_r, res) => res.writeHead(200).end('thanks'),
    ];
    const { base, received } = await receiver((request, res) => answers.shift()!(request, res));
    const webhook = sink({ url: base });

    const [first] = await webhook.deliver([message('42', { attempt: 1 })], never);
    const [second] = await webhook.deliver([message('42', { attempt: 2 })], never);
    const [third] = await webhook.deliver([message('42', { attempt: 3 })], never);

    const one = failure(first);
    expect(one.permanent).toBeFalsy();
    expect(one.retryAfterMs).toBeUndefined();
    expect(one.error).toMatch(/HTTP 500/);
    // The receiver's words go to `detail` (last_error), never into `error` (the relay logs that).
    expect(one.error).not.toMatch(/database is down/);
    expect(one.detail).toMatch(/database is down/);
    const two = failure(second);
    expect(two.permanent).toBeFalsy();
    expect(two.retryAfterMs).toBe(2_000);
    expect(two.error).toMatch(/HTTP 429/);
    expect(third).toEqual({ ok: true });
    expect(received.map((r) => r.headers['webhook-id'])).toEqual(['msg_42', 'msg_42', 'msg_42']);
    expect(received.every((r) => r.verifyError === null)).toBe(true);
  });

  it('reads Retry-After as an HTTP-date, caps it, and ignores garbage', async () => {
    const retryAfter: Record<string, string> = {
      date: new Date(Date.now() + 30_000).toUTCString(),
      day: '86400',
      garbage: 'soon',
    };
    const { base } = await receiver((request, res) => {
      res.writeHead(503, { 'retry-after': retryAfter[request.path.slice(1)]! }).end();
    });
    const webhook = sink({ url: (m) => `${base}/${m.topic}` });

    const [date, day, garbage] = await webhook.deliver(
      ['date', 'day', 'garbage'].map((topic, i) => message(String(i + 1), { topic })),
      never,
    );

    // The date has whole seconds and the clock moves on: roughly 30 s, never more.
    expect(failure(date).retryAfterMs).toBeGreaterThan(20_000);
    expect(failure(date).retryAfterMs).toBeLessThanOrEqual(30_000);
    expect(failure(day).retryAfterMs).toBe(maxRetryAfterMs);
    expect(failure(garbage).retryAfterMs).toBeUndefined();
    expect(failure(garbage).permanent).toBeFalsy();
  });

  it('fails 4xx and unfollowed 3xx for good, retries 408, bounds the error text', async () => {
    const { base, received } = await receiver((request, res) => {
      const status = Number(request.path.slice(1));
      if (status === 301) res.writeHead(301, { location: `${base}/followed` }).end();
      else if (status === 400)
        res.writeHead(400).end(`field "amount" missing ${'x'.repeat(500_000)}`);
      else if (status === 200) res.writeHead(200).end('y'.repeat(1_000_000));
      else res.writeHead(status).end();
    });
    const webhook = sink({ url: (m) => `${base}/${m.topic}` });
    const statuses = ['400', '404', '301', '408', '200'];

    const [bad, missing, moved, timeout, ok] = await webhook.deliver(
      statuses.map((topic, i) => message(String(i + 1), { topic })),
      never,
    );

    expect(failure(bad).permanent).toBe(true);
    expect(failure(bad).error).toBe('webhook answered HTTP 400');
    expect(failure(bad).detail).toMatch(/^field "amount" missing x+$/);
    expect(failure(bad).detail!.length).toBeLessThan(300);
    expect(failure(missing).permanent).toBe(true);
    expect(failure(missing).error).toMatch(/HTTP 404/);
    expect(failure(moved).permanent).toBe(true);
    expect(failure(moved).error).toMatch(/HTTP 301.*redirects are not followed/);
    expect(failure(timeout).permanent).toBeFalsy();
    expect(failure(timeout).error).toMatch(/HTTP 408/);
    expect(ok).toEqual({ ok: true });
    expect(received.map((r) => r.path).sort()).toEqual(statuses.map((s) => `/${s}`).sort());
  });

  it('fails a request that outlives timeoutMs, retryably, without throwing', async () => {
    const { base, received } = await receiver(() => {
      // Never answers.
    });
    const [result] = await sink({ url: base, timeoutMs: 200 }).deliver([message('1')], never);

    const timedOut = failure(result);
    expect(timedOut.permanent).toBeFalsy();
    expect(timedOut.error).toMatch(/timed out after 200 ms/);
    expect(received).toHaveLength(1);
  });

  it('fails for good without a request a header value fetch would refuse, sends one with whitespace at its ends, refuses a bad one of its own at start', async () => {
    const { base, received } = await receiver((_, res) => res.writeHead(204).end());
    const webhook = sink({ url: base });
    // Stored before publish refused control characters: Headers takes it, fetch does not.
    const [control, wide, trimmed] = await webhook.deliver(
      [
        message('1', { headers: { 'x-trace': 'a\u0001b' } }),
        message('2', { headers: { 'x-trace': '\u20ac' } }),
        // Whitespace at either end is stripped by Headers and sent, as it always was.
        message('3', { headers: { 'x-trace': 'ok\n' } }),
      ],
      never,
    );
    expect(trimmed).toEqual({ ok: true });
    expect(failure(control)).toMatchObject({
      permanent: true,
      error: 'message header "x-trace" is not a valid header name or value',
    });
    expect(failure(wide)).toMatchObject({ permanent: true });
    expect(received.map((r) => r.headers['x-trace'])).toEqual(['ok']);
    expect(() => sink({ url: base, headers: { 'x-static': 'a\u007fb' } })).toThrow(ConfigError);
  });

  it('fails a refused connection retryably', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const { port } = closed.address() as AddressInfo;
    await new Promise<void>((resolve) => closed.close(() => resolve()));

    const [result] = await sink({ url: `http://127.0.0.1:${port}/` }).deliver(
      [message('1')],
      never,
    );

    const refused = failure(result);
    expect(refused.permanent).toBeFalsy();
    expect(refused.error).toMatch(/ECONNREFUSED/);
  });

  it('stops when the batch signal aborts', async () => {
    const { base } = await receiver(() => {});
    const controller = new AbortController();
    const pending = sink({ url: base, timeoutMs: 30_000 }).deliver(
      [message('1'), message('2')],
      controller.signal,
    );
    setTimeout(() => controller.abort(), 100);

    const results = await pending;

    for (const result of results) {
      expect(failure(result).permanent).toBeFalsy();
      expect(failure(result).error).toMatch(/aborted/);
    }
  });

  it('fails a message whose URL or header cannot be sent for good, without echoing it', async () => {
    const { base, received } = await receiver((_r, res) => res.writeHead(200).end());
    const webhook = sink({
      url: (m) => {
        if (m.topic === 'throws') throw new Error('no endpoint for topic');
        return m.topic === 'ftp' ? 'ftp://example.test/?token=hidden' : base;
      },
    });

    const [throws, ftp, header] = await webhook.deliver(
      [
        message('1', { topic: 'throws' }),
        message('2', { topic: 'ftp' }),
        message('3', { headers: { 'x-bad': 'line\nbreak-value' } }),
      ],
      never,
    );

    expect(failure(throws).permanent).toBe(true);
    expect(failure(throws).error).toMatch(/no endpoint for topic/);
    expect(failure(ftp).permanent).toBe(true);
    expect(failure(ftp).error).not.toMatch(/hidden/);
    expect(failure(header).permanent).toBe(true);
    expect(failure(header).error).toMatch(/"x-bad"/);
    expect(failure(header).error).not.toMatch(/break-value/);
    expect(received).toHaveLength(0);
  });

  it('fails a message whose URL is on a port fetch refuses for good, naming the port', async () => {
    const webhook = sink({ url: (m) => `http://127.0.0.1:${m.topic}/hooks?token=hidden` });
    const results = await webhook.deliver(
      ['6000', '10080', '5060'].map((port) => message('1', { topic: port })),
      never,
    );
    for (const [i, port] of ['6000', '10080', '5060'].entries()) {
      const result = failure(results[i]);
      expect(result.permanent).toBe(true);
      expect(result.error).toBe(
        `webhook url for this message: fetch refuses port ${port} (a "bad port")`,
      );
    }
  });

  it('logs reason codes, never payloads, secrets, header values or response bodies', async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'debug' }, { write: (line: string) => lines.push(line) });
    const { base } = await receiver((request, res) => {
      const status = Number(request.path.slice(1));
      res.writeHead(status, status === 503 ? { 'retry-after': '1' } : {}).end('response-body-text');
    });
    const webhook = webhookSink({
      url: (m) => `${base}/${m.topic}`,
      secret,
      headers: { authorization: 'Bearer static-token' },
      logger,
    });

    await webhook.deliver(
      ['500', '503', '400'].map((topic, i) =>
        message(String(i + 1), {
          topic,
          payload: { card: 'payload-marker' },
          headers: { 'x-trace': 'header-value' },
        }),
      ),
      never,
    );

    const log = lines.join('\n');
    expect(log).toMatch(/webhook_retryable_status/);
    expect(log).toMatch(/webhook_retry_after/);
    expect(log).toMatch(/webhook_rejected/);
    // An operator reading a log line looks its reason code up in the README.
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    for (const line of lines) {
      expect(readme).toContain(`\`${(JSON.parse(line) as { reason: string }).reason}\``);
    }
    for (const secretish of [
      'payload-marker',
      'header-value',
      'static-token',
      'response-body-text',
      secret.slice('whsec_'.length),
    ]) {
      expect(log).not.toContain(secretish);
    }
  });
});

describe('webhook signatures', () => {
  it('a tampered body, id or secret fails verification', async () => {
    const { base, received } = await receiver((_r, res) => res.writeHead(200).end());
    await sink({ url: base }).deliver([message('7')], never);
    const [{ rawBody, headers }] = received as [Received];
    const verifier = new Webhook(secret);

    expect(verifier.verify(rawBody, headers)).toMatchObject({ type: 'order.created' });

    const tampered = Buffer.from(rawBody);
    tampered[tampered.indexOf('7')] = '8'.charCodeAt(0);
    expect(() => verifier.verify(tampered, headers)).toThrow(WebhookVerificationError);
    expect(() => verifier.verify(rawBody, { ...headers, 'webhook-id': 'msg_8' })).toThrow(
      WebhookVerificationError,
    );
    const other = new Webhook(`whsec_${randomBytes(32).toString('base64')}`);
    expect(() => other.verify(rawBody, headers)).toThrow(WebhookVerificationError);
  });
});

describe('webhookSink options', () => {
  const url = 'https://hooks.example.test/in';

  it('refuses a missing, empty or malformed secret, naming the option', () => {
    for (const bad of [undefined, '', 'whsec_', 'password', 'whsec_not base64!', 'whsec_abc']) {
      const make = () => webhookSink({ url, secret: bad as string });
      expect(make).toThrow(ConfigError);
      expect(make).toThrow(/webhookSink options: secret must be a Standard Webhooks secret/);
    }
    expect(() => webhookSink({ url, secret: 'password' })).not.toThrow(/password/);
  });

  it('refuses other bad options', () => {
    const ok = { url, secret };
    expect(() => webhookSink({ ...ok, url: 'ftp://example.test' })).toThrow(/url/);
    expect(() => webhookSink({ ...ok, url: 'not a url' })).toThrow(/url/);
    expect(() => webhookSink({ ...ok, timeoutMs: 0 })).toThrow(/timeoutMs/);
    for (const port of [6000, 10080, 6666]) {
      const badPort = () => webhookSink({ ...ok, url: `http://127.0.0.1:${port}/hooks` });
      expect(badPort).toThrow(ConfigError);
      expect(badPort).toThrow(
        `webhookSink options: url: fetch refuses port ${port} (a "bad port")`,
      );
    }
    expect(webhookSink({ ...ok, url: 'http://127.0.0.1:6001/hooks' }).name).toBe('webhook');
    expect(() => webhookSink({ ...ok, concurrency: 1.5 })).toThrow(/concurrency/);
    expect(() => webhookSink({ ...ok, idPrefix: 'has space' })).toThrow(/idPrefix/);
    expect(() => webhookSink({ ...ok, timeout: 5 } as never)).toThrow(/unknown option "timeout"/);
    const badHeader = () => webhookSink({ ...ok, headers: { authorization: 'Bearer a\nb' } });
    expect(badHeader).toThrow(/headers: "authorization"/);
    expect(badHeader).not.toThrow(/Bearer/);
    for (const [value, kind] of [
      [5, 'a number'],
      [null, 'null'],
      [['a'], 'an array'],
    ] as const) {
      const notString = () => webhookSink({ ...ok, headers: { 'x-a': value as never } });
      expect(notString).toThrow(ConfigError);
      expect(notString).toThrow(
        `webhookSink options: headers: "x-a" must be a string, not ${kind}`,
      );
    }
    expect(() => webhookSink({ ...ok, headers: { 'Webhook-Signature': 'v1,x' } })).toThrow(
      /headers: "Webhook-Signature" is set by the sink/,
    );
    expect(webhookSink(ok).name).toBe('webhook');
  });

  it('refuses a timeoutMs that is not whole ms from 1 to an hour, naming it and the value', async () => {
    // Past 2^31-1 ms Node fires the timeout after 1 ms: every request would time out at once.
    for (const timeoutMs of [3_000_000_000, 2 ** 31, 3_600_001, Infinity, NaN, 0, 0.5]) {
      const make = () => webhookSink({ url, secret, timeoutMs });
      expect(make).toThrow(ConfigError);
      expect(make).toThrow(
        `webhookSink options: timeoutMs must be an integer from 1 to 3600000, got ${timeoutMs}`,
      );
    }
    const { base } = await receiver((_request, response) => {
      setTimeout(() => response.writeHead(200).end(), 50);
    });
    const results = await sink({ url: base, timeoutMs: 3_600_000 }).deliver([message('1')], never);
    expect(results).toEqual([{ ok: true }]);
  });
});

describe('parseRetryAfter', () => {
  const now = Date.parse('Sun, 06 Nov 1994 08:49:27 GMT');

  it('reads delta-seconds and HTTP-dates, clamped to [0, max]', () => {
    expect(parseRetryAfter('0', now)).toBe(0);
    expect(parseRetryAfter(' 5 ', now)).toBe(5_000);
    expect(parseRetryAfter('7200', now)).toBe(maxRetryAfterMs);
    expect(parseRetryAfter('9'.repeat(400), now)).toBe(maxRetryAfterMs);
    expect(parseRetryAfter('Sun, 06 Nov 1994 08:49:37 GMT', now)).toBe(10_000);
    expect(parseRetryAfter('Sunday, 06-Nov-94 08:49:37 GMT', now)).toBe(10_000);
    // asctime: no zone named, yet UTC whatever the process's time zone.
    expect(parseRetryAfter('Sun Nov  6 08:49:37 1994', now)).toBe(10_000);
    expect(parseRetryAfter('Wed Nov 16 08:49:37 1994', now)).toBe(maxRetryAfterMs);
    expect(parseRetryAfter('Sun Nov  6 08:00:00 1994', now)).toBe(0);
    expect(parseRetryAfter('Sun, 06 Nov 1994 08:00:00 GMT', now)).toBe(0);
  });

  it('ignores what is not a Retry-After value', () => {
    for (const garbage of [
      null,
      undefined,
      '',
      '-1',
      '1.5',
      'soon',
      '1994-11-06',
      '1 2',
      'Sun Nov  6 08:49:37 94',
    ]) {
      expect(parseRetryAfter(garbage, now)).toBeUndefined();
    }
  });
});
