import { request } from 'node:http';
import { createClient, createWorker, defineJob, NonRetryableError } from '@skiplock/queue';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createDashboard } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { serve } from './support.js';

const db = await useTestDatabase();
const silent = pino({ level: 'silent' });
const token = 'a-long-random-operator-token-for-tests';
const dashboard = createDashboard({ pool: db.pool, token, logger: silent });
const served = await serve(dashboard);
afterAll(async () => {
  await served.close();
  await dashboard.close();
});
const { port } = new URL(served.url);

/** One raw HTTP request, with whatever Host header the test names (fetch will not send one). */
function send(
  method: string,
  path: string,
  headers: Record<string, string>,
  body = '',
): Promise<{ status: number; location: string | undefined; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        headers: { ...headers, 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, location: res.headers.location, text }),
        );
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('dashboard safety', () => {
  it('answers reads only for loopback host names: a rebound domain gets nothing', async () => {
    const evil = await send('GET', '/', { host: `attacker.example:${port}` });
    expect(evil.status).toBe(421);
    expect(evil.text).not.toContain('<html');
    const local = await send('GET', '/', { host: `localhost:${port}` });
    expect(local.status).toBe(200);
  });

  it('never redirects a sign-in off the dashboard, whatever the next path hides', async () => {
    for (const next of [
      '/.//evil.com',
      '/..//evil.com',
      '/a/..//evil.com',
      '//evil.com',
      'https://evil.com',
    ]) {
      const form = new URLSearchParams({ operator: 'ada', token, next }).toString();
      const res = await send(
        'POST',
        '/sign-in',
        {
          host: `127.0.0.1:${port}`,
          origin: `http://127.0.0.1:${port}`,
          'content-type': 'application/x-www-form-urlencoded',
        },
        form,
      );
      expect(res.status, next).toBe(303);
      expect(res.location, next).toMatch(/^\/\?notice=signed_in$/);
    }
  });

  it('refuses to retry or discard a saga step job on its own, in bulk or one by one', async () => {
    // A job type in the saga package's namespace, as its steps are named: it moves only with its saga.
    const step = defineJob({
      type: 'saga:billing:v1:charge',
      payload: z.object({ n: z.number() }),
      maxAttempts: 1,
      handler: () => {
        throw new NonRetryableError('declined');
      },
    });
    const plain = defineJob({
      type: 'plain-dead',
      payload: z.object({ n: z.number() }),
      maxAttempts: 1,
      handler: () => {
        throw new NonRetryableError('broken');
      },
    });
    const client = createClient({ pool: db.pool, logger: silent });
    const a = await client.enqueue(step, { n: 1 });
    const b = await client.enqueue(plain, { n: 2 });
    const worker = createWorker({
      pool: db.pool,
      jobs: [step, plain],
      logger: silent,
      pollIntervalMs: 20,
    });
    await worker.start();
    await waitFor(async () => {
      const [x, y] = await Promise.all([client.getJob(a.id), client.getJob(b.id)]);
      return x?.status === 'dead' && y?.status === 'dead';
    });
    await worker.stop();
    const auth = {
      host: `127.0.0.1:${port}`,
      origin: `http://127.0.0.1:${port}`,
      authorization: `Bearer ${token}`,
      'x-skiplock-operator': 'ada',
      'content-type': 'application/x-www-form-urlencoded',
    };
    const one = await send('POST', `/jobs/${a.id}/retry`, auth, '');
    expect(one.status).toBe(409);
    const bulk = await send(
      'POST',
      '/jobs/bulk',
      auth,
      new URLSearchParams([
        ['action', 'discard'],
        ['id', a.id],
        ['id', b.id],
      ]).toString(),
    );
    expect(bulk.status).toBe(303);
    expect((await client.getJob(a.id))?.status).toBe('dead');
    expect(await client.getJob(b.id)).toBeNull();
    await client.close();
  });

  // Last in this file: it drops the outbox's table from this file's database.
  it('outbox page: a bad page id or message id is refused; no outbox table is said, not failed', async () => {
    const host = { host: `127.0.0.1:${port}` };
    const shown = await send('GET', '/outbox', host);
    expect(shown.status).toBe(200);
    expect(shown.text).toContain('data-testid="outbox-delivered"');
    for (const before of ['abc', '9999999999999999999']) {
      const badPage = await send('GET', `/outbox?before=${before}`, host);
      expect(badPage.status).toBe(400);
      expect(badPage.text).toContain('before must be a message id');
    }
    const auth = {
      ...host,
      origin: `http://127.0.0.1:${port}`,
      authorization: `Bearer ${token}`,
      'x-skiplock-operator': 'ada',
      'content-type': 'application/x-www-form-urlencoded',
    };
    // 19 digits, past the bigint range: the outbox's own check names it.
    const past = await send('POST', '/outbox/retry', auth, 'id=9999999999999999999');
    expect(past.status).toBe(400);
    expect(past.text).toContain('is not a message id');
    await db.pool.query('DROP TABLE skiplock.outbox_messages CASCADE');
    const missing = await send('GET', '/outbox', host);
    expect(missing.status).toBe(200);
    expect(missing.text).toContain('This database has no outbox');
    const noTable = await send('POST', '/outbox/retry', auth, 'id=1');
    expect(noTable.status).toBe(409);
    expect(noTable.text).toContain('no outbox table');
  });
});
