import { createRelay, deadMessages, publishMany, type Sink } from '@skiplock/outbox';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { createDashboard } from '../src/index.js';
import { NoticeSigner } from '../src/security.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { rawHttp, serve } from './support.js';

const db = await useTestDatabase();
const silent = pino({ level: 'silent' });
const token = 'a-long-random-operator-token-for-tests';
const dashboard = createDashboard({ pool: db.pool, token, logger: silent });
const served = await serve(dashboard);
afterAll(async () => {
  await served.close();
  await dashboard.close();
});
const { port, operatorForm, send } = rawHttp(served, token);
const host = { host: `127.0.0.1:${port}` };

describe('dashboard input', () => {
  it('ids written with leading zeros, or 0, are read or refused by name, never failed', async () => {
    const sink: Sink = {
      name: 'test',
      deliver: async (messages) =>
        messages.map(() => ({ ok: false, error: 'refused', permanent: true })),
      close: async () => {},
    };
    const [id] = await publishMany(db.pool, [{ topic: 't', key: 'k', payload: 1 }]);
    const relay = createRelay({ pool: db.pool, sink, logger: silent });
    expect((await relay.runOnce()).claimed).toBe(1);
    const padded = `00${id!}`;

    // A page id of 0 names no message; one with leading zeros is the same id.
    const zero = await send('GET', '/outbox?before=0', host);
    expect(zero.status).toBe(400);
    expect(zero.text).toContain('before must be a message id');
    const older = await send('GET', `/outbox?before=${padded}`, host);
    expect(older.status).toBe(200);
    expect((await send('GET', '/jobs?before=0', host)).text).toContain('before must be a job id');
    expect((await send('GET', '/jobs?before=007', host)).status).toBe(200);

    const none = await send('POST', '/outbox/retry', operatorForm, 'id=0');
    expect(none.status).toBe(400);
    expect(none.text).toContain('&quot;0&quot; is not a message id');
    const sent = await send('POST', '/outbox/retry', operatorForm, `id=${padded}&id=${id!}`);
    expect(sent.status).toBe(303);
    expect(sent.location).toContain('notice=outbox_retried');
    expect((await deadMessages(db.pool)).some((m) => m.id === id)).toBe(false);

    const bulk = await send('POST', '/jobs/bulk', operatorForm, 'action=discard&id=0');
    expect(bulk.status).toBe(400);
    expect(bulk.text).toContain('&quot;0&quot; is not a job id');
  });
});

describe('dashboard notices', () => {
  it('a notice named after an Object property is no notice, and the page is answered', async () => {
    for (const notice of ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf']) {
      const res = await send('GET', `/jobs?notice=${notice}&n=3`, host);
      expect(res.status, notice).toBe(200);
      expect(res.text, notice).not.toContain('data-testid="notice"');
    }
  });

  it('shows only the notices of its own redirects: a crafted link reports nothing', async () => {
    // Before: each of these showed its notice ("Job retried: it runs again now.", "-25000 dead
    // jobs discarded.", "Signed in.") to whoever followed the link.
    for (const path of [
      '/jobs/1?notice=job_retried',
      '/jobs?status=dead&notice=bulk_discarded&n=-25000',
      '/?notice=signed_in',
      '/?notice=signed_in&t=1&sig=AAAAAAAAAAAAAAAAAAAAAA',
    ]) {
      const res = await send('GET', path, host);
      expect(res.text, path).not.toContain('data-testid="notice"');
    }
    // A real action's redirect shows its notice; the same link with its count changed does not.
    const done = await send('POST', '/jobs/bulk', operatorForm, 'action=retry&id=987654321');
    expect(done.status).toBe(303);
    expect(done.location).toMatch(/notice=bulk_retried_kept&n=0&t=\d+&sig=[\w-]{22}$/);
    const shown = await send('GET', done.location!, host);
    expect(shown.text).toContain('0 dead jobs retried; the others were not dead any more');
    const changed = await send('GET', done.location!.replace('&n=0', '&n=25000'), host);
    expect(changed.text).not.toContain('data-testid="notice"');
  });

  it('signs a notice for its page, for a few minutes, with a key of its own, never from the token', () => {
    const signer = new NoticeSigner();
    const now = Date.now();
    const query = (at: number, path = '/jobs/5') =>
      new URLSearchParams(signer.params('job_retried', undefined, path, at));
    expect(signer.read(query(now), '/jobs/5', now)).toEqual({ notice: 'job_retried', n: 0 });
    expect(signer.read(query(now - 9 * 60_000), '/jobs/5', now)).not.toBeNull();
    expect(signer.read(query(now - 11 * 60_000), '/jobs/5', now)).toBeNull();
    // Another job's page: a real redirect's link copied to a dead job said it was retried.
    expect(signer.read(query(now), '/jobs/6', now)).toBeNull();
    // Before, the key came from the token: a sign-out without a session got a signature over a
    // known text, against which guesses of the token could be tested offline. Another signer (a
    // second process) shows none of this one's notices.
    expect(new NoticeSigner().read(query(now), '/jobs/5', now)).toBeNull();
  });
});

describe('dashboard notices', () => {
  it('of one process are not shown by another with the same token: nothing signed from the token leaves it', async () => {
    const other = createDashboard({ pool: db.pool, token, logger: silent });
    const otherServed = await serve(other);
    try {
      // A sign-out needs no session: anyone gets its signed notice.
      const out = await send(
        'POST',
        '/sign-out',
        {
          ...host,
          origin: `http://${host.host}`,
          'content-type': 'application/x-www-form-urlencoded',
        },
        '',
      );
      expect(out.location).toMatch(/notice=signed_out&t=\d+&sig=/);
      expect((await send('GET', out.location!, host)).text).toContain('data-testid="notice"');
      const elsewhere = rawHttp(otherServed, token);
      const shown = await elsewhere.send('GET', out.location!, {
        host: `127.0.0.1:${elsewhere.port}`,
      });
      // Before: shown, its signature made with a key derived from the token, against which
      // guesses of the token could be tested offline, past the wrong-token limit.
      expect(shown.status).toBe(200);
      expect(shown.text).not.toContain('data-testid="notice"');
    } finally {
      await otherServed.close();
      await other.close();
    }
  });
});

describe('dashboard addresses', () => {
  it('a path starting with // is answered as a path, not dropped or read as a host', async () => {
    for (const path of ['//', '//[', '///']) {
      const res = await send('GET', path, host);
      expect(res.status, path).toBe(404);
    }
    // Not the overview of a host named "jobs".
    expect((await send('GET', '//jobs', host)).status).toBe(404);
    expect((await send('GET', '/jobs', host)).status).toBe(200);
  });
});

describe('dashboard bulk actions on saga step jobs', () => {
  it('offers no checkbox on a dead saga step job, and the notice says what was left', async () => {
    const { rows } = await db.pool.query<{ id: string; job_type: string }>(
      `INSERT INTO skiplock.jobs (queue, job_type, status, attempts)
       VALUES ('bulkq', 'saga:billing:v1:charge', 'dead', 1), ('bulkq', 'plain', 'dead', 1)
       RETURNING id::text, job_type`,
    );
    const step = rows.find((r) => r.job_type.startsWith('saga:'))!.id;
    const plain = rows.find((r) => r.job_type === 'plain')!.id;
    const post = { ...host, origin: operatorForm.origin };
    const signIn = await send(
      'POST',
      '/sign-in',
      { ...post, 'content-type': 'application/x-www-form-urlencoded' },
      new URLSearchParams({ operator: 'ada', token, next: '/' }).toString(),
    );
    const cookie = signIn.cookie;
    const list = await send('GET', '/jobs?queue=bulkq&status=dead', { ...host, cookie });
    expect(list.text).toContain(`data-job-id="${plain}"`);
    expect(list.text).toContain(`value="${plain}" aria-label="select job ${plain}"`);
    expect(list.text).toContain(`data-job-id="${step}"`);
    expect(list.text).not.toContain(`aria-label="select job ${step}"`);

    const csrf = /name="_csrf" value="([^"]+)"/.exec(list.text)![1]!;
    const done = await send(
      'POST',
      '/jobs/bulk',
      { ...post, cookie, 'content-type': 'application/x-www-form-urlencoded' },
      new URLSearchParams([
        ['_csrf', csrf],
        ['action', 'retry'],
        ['id', plain],
        ['id', step],
      ]).toString(),
    );
    expect(done.status).toBe(303);
    const shown = (await send('GET', done.location!, { ...host, cookie })).text.replace(
      /\s+/g,
      ' ',
    );
    expect(shown).toContain(
      '1 dead job retried; the others were not dead any more, are saga steps',
    );
  });
});

describe('dashboard saga list cursor', () => {
  it('a cursor whose time PostgreSQL cannot read is refused by name, not failed', async () => {
    const cursor = (time: string) =>
      Buffer.from(JSON.stringify([time, 'x']), 'utf8').toString('base64url');
    for (const time of ['2020-01-01 00:00 +25:00', '2020-01-01 00:00 Mars/Olympus', 'soon']) {
      const res = await send('GET', `/sagas?cursor=${cursor(time)}`, host);
      expect(res.status, time).toBe(400);
      expect(res.text, time).toContain('That page cursor is not one this dashboard made.');
    }
    const fine = await send('GET', `/sagas?cursor=${cursor('2020-01-01 00:00:00+00')}`, host);
    expect(fine.status).toBe(200);
  });
});
