import { createServer, type Socket, type AddressInfo } from 'node:net';
import pg from 'pg';
import { createClient, createWorker, defineJob, NonRetryableError } from '@skiplock/queue';
import { createRelay, deadMessages, publishMany, type Sink } from '@skiplock/outbox';
import { pino } from 'pino';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { createDashboard } from '../src/index.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { rawHttp, serve, operatorPost } from './support.js';

const db = await useTestDatabase();
const silent = pino({ level: 'silent' });
const token = 'a-long-random-operator-token-for-tests';
const dashboard = createDashboard({ pool: db.pool, token, logger: silent });
const served = await serve(dashboard);
afterAll(async () => {
  await served.close();
  await dashboard.close();
});
const { port, operatorForm, send, signIn: signInHere } = rawHttp(served, token);

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
      expect(res.location, next).toMatch(/^\/\?notice=signed_in&t=\d+&sig=[\w-]+$/);
    }
  });

  it('signs out only from its own pages: a form on another site neither clears the cookie nor goes unlogged', async () => {
    const logs = captureLogs();
    const own = createDashboard({ pool: db.pool, token, logger: logs.logger });
    const ownServed = await serve(own);
    try {
      const raw = rawHttp(ownServed, token);
      const here = { host: `127.0.0.1:${raw.port}`, origin: `http://127.0.0.1:${raw.port}` };
      const form = { 'content-type': 'application/x-www-form-urlencoded' };
      const signIn = await raw.send(
        'POST',
        '/sign-in',
        { ...here, ...form },
        new URLSearchParams({ operator: 'ada', token }).toString(),
      );
      const session = { cookie: signIn.cookie };
      const page = await raw.send('GET', '/', { host: here.host, ...session });
      const csrf = /name="_csrf" value="([^"]+)"/.exec(page.text)?.[1];
      expect(csrf).toBeTruthy();
      // Another dashboard's session under the same name, sent after this one's (a dashboard
      // mounted at / beside this one at /staging): before, only the last was read, and the
      // operator was signed out here for good.
      const both = await raw.send('GET', '/', {
        host: here.host,
        cookie: `${signIn.cookie}; skiplock_dashboard=another.dashboards-session`,
      });
      expect(both.text).toMatch(/class="who"[^>]*>\s*ada\s*</);
      const evil = { ...here, origin: 'https://evil.example' };
      // Before: each of these answered 303 with the cookie cleared (a browser takes that
      // Set-Cookie on a cross-site top-level navigation), and only the last was logged.
      for (const [headers, body] of [
        [{ ...evil, ...form }, ''], // what the browser sends: a SameSite=Strict cookie stays home
        [{ ...evil, ...form, ...session }, `_csrf=${csrf}`],
        [{ ...here, ...form, ...session }, '_csrf=forged'],
      ] as const) {
        const refused = await raw.send('POST', '/sign-out', headers, body);
        expect(refused.status).toBe(403);
        expect(refused.cookie).toBe('');
      }
      expect(logs.lines.filter((l) => l.reason === 'dashboard_csrf_refused')).toHaveLength(3);
      const out = await raw.send(
        'POST',
        '/sign-out',
        { ...here, ...form, ...session },
        `_csrf=${csrf}`,
      );
      expect(out.status).toBe(303);
      expect(out.location).toMatch(/notice=signed_out/);
      expect(out.cookie).toBe('skiplock_dashboard=');
      expect(logs.reasons()).toContain('dashboard_sign_out');
      // A cookie that is no session any more is cleared from the dashboard's own pages.
      const stale = await raw.send(
        'POST',
        '/sign-out',
        { ...here, ...form, cookie: 'skiplock_dashboard=stale.value' },
        '',
      );
      expect(stale.status).toBe(303);
      expect(stale.cookie).toBe('skiplock_dashboard=');
    } finally {
      await ownServed.close();
      await own.close();
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
    const auth = operatorForm;
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

  it('a retried job whose key has no free slot is said to wait for one, not to run now', async () => {
    const mail = defineJob({
      type: 'slot-mail',
      payload: z.object({ n: z.number() }),
      handler: () => {},
    });
    const client = createClient({ pool: db.pool, logger: silent });
    const limited = { concurrencyKey: 'tenant-1', concurrencyLimit: 1 } as const;
    const holder = (await client.enqueue(mail, { n: 1 }, limited)).id;
    const retried = (await client.enqueue(mail, { n: 2 }, limited)).id;
    const free = (await client.enqueue(mail, { n: 3 })).id;
    // The holder runs in the key's one slot; the other two died earlier.
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'processing', attempts = 1, locked_by = 'w',
         locked_at = now(), lease_expires_at = now() + interval '10 minutes' WHERE id = $1`,
      [holder],
    );
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'dead', attempts = 5 WHERE id = ANY($1::bigint[])`,
      [[retried, free]],
    );
    const auth = operatorForm;
    const waits = await send('POST', `/jobs/${retried}/retry`, auth, '');
    expect(waits.status).toBe(303);
    expect(waits.location).toMatch(new RegExp(`^/jobs/${retried}\\?notice=job_retried_waiting&t=`));
    expect((await client.getJob(retried))?.status).toBe('waiting');
    const shown = await send('GET', waits.location!, { host: auth.host });
    expect(shown.text).toContain('it is waiting for a slot of its concurrency key');
    expect(shown.text).not.toContain('it runs again now');

    const runs = await send('POST', `/jobs/${free}/retry`, auth, '');
    expect(runs.location).toMatch(new RegExp(`^/jobs/${free}\\?notice=job_retried&t=`));
    expect((await send('GET', runs.location!, { host: auth.host })).text).toContain(
      'Job retried: it runs again now.',
    );
    await client.close();
  });

  it('job ids past the bigint range and saga ids with a NUL are refused, never failed', async () => {
    const host = { host: `127.0.0.1:${port}` };
    const auth = operatorForm;
    const past = '9223372036854775808';
    // 19 digits past the range are no id, but a key may be digits: the lookup still finds it.
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO skiplock.jobs (queue, job_type, status, idempotency_key)
       VALUES ('billing', 'invoice', 'dead', '9999999999999999999') RETURNING id::text`,
    );
    const keyed = rows[0]!.id;
    const lookup = await send('GET', '/jobs?q=9999999999999999999', host);
    expect(lookup.status).toBe(303);
    expect(lookup.location).toBe(`/jobs/${keyed}`);

    const detail = await send('GET', `/jobs/${past}`, host);
    expect(detail.status).toBe(404);
    const older = await send('GET', '/jobs?before=9999999999999999999', host);
    expect(older.status).toBe(400);
    expect(older.text).toContain('before must be a job id');
    for (const action of ['retry', 'cancel']) {
      const one = await send('POST', `/jobs/${past}/${action}`, auth, '');
      expect(one.status, action).toBe(404);
    }
    for (const bad of [past, 'abc', '1 OR 1=1']) {
      const bulk = await send(
        'POST',
        '/jobs/bulk',
        auth,
        new URLSearchParams([
          ['action', 'discard'],
          ['id', keyed],
          ['id', bad],
        ]).toString(),
      );
      expect(bulk.status, bad).toBe(400);
      expect(bulk.text).toContain(`&quot;${bad}&quot; is not a job id`);
    }
    // Refused whole: the good id in the same form was not discarded either.
    expect(
      (await db.pool.query('SELECT 1 FROM skiplock.jobs WHERE id = $1', [keyed])).rowCount,
    ).toBe(1);

    // PostgreSQL text holds no NUL: a saga id or a lookup or filter with one names nothing.
    for (const path of ['/sagas/x%00y', '/jobs?q=a%00b', '/jobs?queue=a%00', '/sagas?name=a%00']) {
      const nul = await send('GET', path, host);
      expect(nul.status, path).toBe(400);
      expect(nul.text).toContain('The address holds a NUL character');
    }
    // A misspelt filter is refused by name, not ignored (a list of every job would look filtered).
    for (const [path, said] of [
      ['/jobs?status=daed', 'status must be one of pending, '],
      ['/sagas?status=faild', 'status must be one of '],
      ['/sagas?version=1.5', 'version must be a whole number from 1, not &quot;1.5&quot;'],
      ['/sagas?version=0', 'version must be a whole number'],
    ]) {
      const bad = await send('GET', path!, host);
      expect(bad.status, path).toBe(400);
      expect(bad.text).toContain(said);
    }
    expect((await send('GET', '/jobs?status=dead', host)).status).toBe(200);
    expect((await send('GET', '/jobs?status=&queue=', host)).status).toBe(200);
    const nulAction = await send('POST', '/sagas/x%00y/cancel', auth, '');
    expect(nulAction.status).toBe(400);
    expect((await send('GET', '/sagas/no-such-saga', host)).status).toBe(404);
  });

  it('refuses the token as an operator name, never logging or showing it, and goes by the session whatever bearer a proxy adds', async () => {
    const logs = captureLogs();
    const own = createDashboard({ pool: db.pool, token, logger: logs.logger });
    const ownServed = await serve(own);
    try {
      const raw = rawHttp(ownServed, token);
      const here = { host: `127.0.0.1:${raw.port}`, origin: `http://127.0.0.1:${raw.port}` };
      const form = { ...here, 'content-type': 'application/x-www-form-urlencoded' };
      // The two fields swapped, then both the token: refused, and the token goes nowhere.
      for (const fields of [
        { operator: token, token: 'ada' },
        { operator: token, token },
      ]) {
        const res = await raw.send(
          'POST',
          '/sign-in',
          form,
          new URLSearchParams(fields).toString(),
        );
        expect(res.status).toBe(401);
        expect(res.cookie).toBe('');
        expect(res.text).toContain('That name is the operator token');
        expect(res.text).not.toContain(token);
      }
      // A script naming itself with the token: refused too.
      const named = await raw.send('POST', '/jobs/1/cancel', {
        ...raw.operatorForm,
        'x-skiplock-operator': token,
      });
      expect(named.status).toBe(400);
      expect(JSON.stringify(logs.lines)).not.toContain(token);
      expect(logs.lines.filter((l) => l.reason === 'dashboard_sign_in_refused')).toHaveLength(2);

      // Signed in, behind a proxy that adds its own bearer token to every request.
      const refusedBefore = logs.reasons().filter((r) => r === 'dashboard_token_refused').length;
      const client = createClient({ pool: db.pool, logger: silent });
      const def = defineJob({ type: 'behind-proxy', payload: z.object({}), handler: () => {} });
      const { id } = await client.enqueue(def, {}, { runAt: new Date(Date.now() + 3_600_000) });
      const signIn = await raw.send(
        'POST',
        '/sign-in',
        form,
        new URLSearchParams({ operator: 'ada', token }).toString(),
      );
      const proxy = { cookie: signIn.cookie, authorization: 'Bearer the-proxys-own-token' };
      const jobPage = await raw.send('GET', `/jobs/${id}`, { host: here.host, ...proxy });
      const csrf = /name="_csrf" value="([^"]+)"/.exec(jobPage.text)?.[1];
      expect(csrf).toBeTruthy();
      // Before: taken for a wrong operator token (401), and counted against the proxy's address.
      const cancelled = await raw.send(
        'POST',
        `/jobs/${id}/cancel`,
        { ...form, ...proxy },
        new URLSearchParams({ _csrf: csrf! }).toString(),
      );
      expect(cancelled.location).toMatch(/notice=job_cancelled&/);
      expect((await client.getJob(id))?.status).toBe('cancelled');
      expect(logs.reasons().filter((r) => r === 'dashboard_token_refused')).toHaveLength(
        refusedBefore,
      );
    } finally {
      await ownServed.close();
      await own.close();
    }
  });

  it('offers retry and cancel for a running job whose lease expired; while the lease is kept, a stop that only its own form sends', async () => {
    const client = createClient({ pool: db.pool, logger: silent });
    const def = defineJob({ type: 'stranded-run', payload: z.object({}), handler: () => {} });
    const { id } = await client.enqueue(def, {});
    const runAs = (lease: string) =>
      db.pool.query(
        `UPDATE skiplock.jobs SET status = 'processing', attempts = 1, locked_by = 'gone',
                locked_at = now(), lease_expires_at = now() + $2::interval WHERE id = $1`,
        [id, lease],
      );
    const signIn = await signInHere();
    const host = { host: `127.0.0.1:${port}`, cookie: signIn.cookie };
    const actions = async () =>
      [
        ...(await send('GET', `/jobs/${id}`, host)).text.matchAll(/action="\/jobs\/\d+\/(\w+)"/g),
      ].map((m) => m[1]);
    await runAs('1 minute');
    const running = await send('GET', `/jobs/${id}`, host);
    expect(await actions()).toEqual(['cancel']);
    expect(running.text).toContain('name="running" value="1"');
    // A cancel without the running form's field (a page read while the job still waited) does
    // not stop it.
    expect((await send('POST', `/jobs/${id}/cancel`, operatorForm, '')).location).toMatch(
      /notice=job_not_cancelled/,
    );
    expect((await client.getJob(id))?.status).toBe('processing');
    // Before: no way to stop a running job from the dashboard.
    const stopped = await send('POST', `/jobs/${id}/cancel`, operatorForm, 'running=1');
    expect(stopped.location).toMatch(/notice=job_cancelled&/);
    expect((await client.getJob(id))?.status).toBe('cancelled');
    // A second stop (a page read before the first) finds it no longer running, and says that.
    expect((await send('POST', `/jobs/${id}/cancel`, operatorForm, 'running=1')).location).toMatch(
      /notice=job_not_stopped&/,
    );
    // Its handler has not returned (its lease is kept): no retry, which could run it twice.
    const stopping = await send('GET', `/jobs/${id}`, host);
    expect(await actions()).toEqual([]);
    expect(stopping.text).toContain('stopping: its handler has not returned');
    expect((await send('POST', `/jobs/${id}/retry`, operatorForm, '')).location).toMatch(
      /notice=job_not_retried/,
    );
    expect((await client.getJob(id))?.status).toBe('cancelled');
    await runAs('-1 minute');
    // Before: no action for a processing job, and the cancel refused.
    expect(await actions()).toEqual(['retry', 'cancel']);
    const cancelled = await send('POST', `/jobs/${id}/cancel`, operatorForm, '');
    expect(cancelled.location).toMatch(/notice=job_cancelled&/);
    expect((await client.getJob(id))?.status).toBe('cancelled');
  });

  it("refuses a job action with 409 after 5 s when another transaction holds the job's row", async () => {
    const client = createClient({ pool: db.pool, logger: silent });
    const def = defineJob({ type: 'held-row', payload: z.object({}), handler: () => {} });
    const { id } = await client.enqueue(def, {}, { runAt: new Date(Date.now() + 3_600_000) });
    const holder = await db.pool.connect();
    try {
      // A job inside its completeWith holds its row so.
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM skiplock.jobs WHERE id = $1 FOR UPDATE', [id]);
      // Before: the request waited as long as the holder did.
      const res = await send('POST', `/jobs/${id}/cancel`, operatorForm, '');
      expect(res.status).toBe(409);
      expect(res.text).toContain(`Not cancelled: job ${id} is held by another transaction`);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    expect((await client.getJob(id))?.status).toBe('pending');
  });

  it('judges a lease by the database clock, not by a host clock an hour behind it', async () => {
    const client = createClient({ pool: db.pool, logger: silent });
    const def = defineJob({ type: 'skewed-run', payload: z.object({}), handler: () => {} });
    const { id } = await client.enqueue(def, {});
    // Its worker is gone: the lease ran out a minute ago by the server's clock.
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'processing', attempts = 1, locked_by = 'gone',
              locked_at = now() - interval '2 minutes', lease_expires_at = now() - interval '1 minute'
       WHERE id = $1`,
      [id],
    );
    // A host whose clock is an hour behind the server's (Date alone is faked: timers run on).
    let skewed: ReturnType<typeof createDashboard> | null = null;
    let servedSkewed: Awaited<ReturnType<typeof serve>> | null = null;
    try {
      vi.useFakeTimers({ toFake: ['Date'], now: Date.now() - 3_600_000 });
      skewed = createDashboard({ pool: db.pool, token, logger: silent });
      servedSkewed = await serve(skewed);
      const http = rawHttp(servedSkewed, token);
      const signIn = await http.signIn();
      const page = await http.send('GET', `/jobs/${id}`, {
        host: `127.0.0.1:${http.port}`,
        cookie: signIn.cookie,
      });
      const actions = [...page.text.matchAll(/action="\/jobs\/\d+\/(\w+)"/g)].map((m) => m[1]);
      // Before: by the host's clock the lease had 59 minutes to run, so the page offered only a
      // stop of the running job, and no retry.
      expect(actions).toEqual(['retry', 'cancel']);
      expect(page.text).not.toContain('name="running" value="1"');
    } finally {
      vi.useRealTimers();
      await servedSkewed?.close();
      await skewed?.close();
    }
  });

  it('answers its sign-in page while the database does not answer, waiting for its clock a second at most', async () => {
    // A server that takes the connection and never answers: pg's connect waits for good (no
    // connectionTimeoutMillis on this pool).
    const sockets = new Set<Socket>();
    const silentServer = createServer((socket) => void sockets.add(socket));
    await new Promise<void>((resolve) => silentServer.listen(0, '127.0.0.1', resolve));
    const { port: deadPort } = silentServer.address() as AddressInfo;
    const deadPool = new pg.Pool({ connectionString: `postgres://x@127.0.0.1:${deadPort}/x` });
    deadPool.on('error', () => {});
    const logs = captureLogs();
    const hung = createDashboard({ pool: deadPool, token, logger: logs.logger });
    const servedHung = await serve(hung);
    try {
      const http = rawHttp(servedHung, token);
      const ask = async () => {
        const started = performance.now();
        const res = await http.send('GET', '/sign-in', { host: `127.0.0.1:${http.port}` });
        return { status: res.status, ms: performance.now() - started };
      };
      // Before: the first request waited on the clock's read for as long as the connect hung.
      const first = await ask();
      expect(first.status).toBe(200);
      expect(first.ms).toBeLessThan(5_000);
      // Later requests do not wait for it at all (the read still hangs).
      const second = await ask();
      expect(second.status).toBe(200);
      expect(second.ms).toBeLessThan(first.ms);
    } finally {
      await servedHung.close();
      for (const socket of sockets) socket.destroy();
      silentServer.close();
      await hung.close();
      await deadPool.end().catch(() => {});
    }
  });

  it("names a waiting job's key holders on its page, linked, with their queue", async () => {
    const client = createClient({ pool: db.pool, logger: silent });
    const def = defineJob({ type: 'keyed-page', payload: z.object({}), handler: () => {} });
    const limited = { concurrencyKey: 'tenant-page', concurrencyLimit: 1 } as const;
    const holder = (await client.enqueue(def, {}, { ...limited, queue: 'retired' })).id;
    const waiter = (await client.enqueue(def, {}, limited)).id;
    await db.pool.query(`UPDATE skiplock.jobs SET status = 'pending' WHERE id = $1`, [holder]);
    const page = await send('GET', `/jobs/${waiter}`, { host: `127.0.0.1:${port}` });
    const holders = /<ul class="holders"[^>]*>([\s\S]*?)<\/ul>/.exec(page.text)?.[1] ?? '';
    // Before: nothing on the page said what the job waited behind.
    expect(holders).toContain(`href="/jobs/${holder}"`);
    expect(holders).toMatch(/in queue\s+retired/);
    const free = await send('GET', `/jobs/${holder}`, { host: `127.0.0.1:${port}` });
    expect(free.text).not.toContain('waits behind');
    // A holder stopped while it ran holds the slot until its handler returns: still named.
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'processing', attempts = 1, locked_by = 'w',
              locked_at = now(), lease_expires_at = now() + interval '1 minute' WHERE id = $1`,
      [holder],
    );
    expect(await client.cancelJob(holder, { running: true })).toBe(true);
    const behind = await send('GET', `/jobs/${waiter}`, { host: `127.0.0.1:${port}` });
    const stopped = /<ul class="holders"[^>]*>([\s\S]*?)<\/ul>/.exec(behind.text)?.[1] ?? '';
    expect(stopped).toContain(`href="/jobs/${holder}"`);
    expect(stopped).toContain('stopped; its handler has not returned');
  });

  it('outbox: hidePayloads hides the last error; a retry without a right to it changes nothing', async () => {
    // The receiver's refusal echoes the message, as a webhook's answer may.
    const echo = 'rejected {"card":"4242424242424242"}';
    const sink: Sink = {
      name: 'test',
      deliver: async (messages) =>
        messages.map(() => ({ ok: false, error: echo, permanent: true })),
      close: async () => {},
    };
    const [id] = await publishMany(db.pool, [
      { topic: 'card.charged', key: 'c1', payload: { card: '4242424242424242' } },
    ]);
    const relay = createRelay({ pool: db.pool, sink, logger: silent });
    expect((await relay.runOnce()).claimed).toBe(1);
    const isDead = async () => (await deadMessages(db.pool)).some((m) => m.id === id);
    expect(await isDead()).toBe(true);
    const host = { host: `127.0.0.1:${port}` };
    const shown = await send('GET', '/outbox', host);
    expect(shown.text).toContain(`data-message-id="${id}"`);
    expect(shown.text).toContain('4242424242424242'); // by default the last error is shown

    const hiding = createDashboard({ pool: db.pool, token, hidePayloads: true, logger: silent });
    const readOnly = createDashboard({ pool: db.pool, token, readOnly: true, logger: silent });
    const [hidingServed, readOnlyServed] = await Promise.all([serve(hiding), serve(readOnly)]);
    try {
      const hidden = await fetch(`${hidingServed.url}/outbox`);
      const hiddenText = await hidden.text();
      expect(hidden.status).toBe(200);
      expect(hiddenText).toContain(`data-message-id="${id}"`);
      expect(hiddenText).not.toContain('4242424242424242');
      expect(hiddenText).toContain('hidden');

      // Read-only: refused whatever the token.
      const refusedReadOnly = await operatorPost(
        `${readOnlyServed.url}/outbox/retry`,
        token,
        `id=${id}`,
      );
      expect(refusedReadOnly.status).toBe(403);
    } finally {
      await Promise.all([hidingServed.close(), readOnlyServed.close()]);
      await Promise.all([hiding.close(), readOnly.close()]);
    }

    const post = { ...host, origin: `http://127.0.0.1:${port}` };
    const urlencoded = { 'content-type': 'application/x-www-form-urlencoded' };
    // Neither signed in nor a bearer token; then a wrong bearer token.
    expect(
      (await send('POST', '/outbox/retry', { ...post, ...urlencoded }, `id=${id}`)).status,
    ).toBe(401);
    const wrongToken = {
      authorization: 'Bearer not-the-operator-token',
      'x-skiplock-operator': 'ada',
    };
    expect(
      (await send('POST', '/outbox/retry', { ...post, ...urlencoded, ...wrongToken }, `id=${id}`))
        .status,
    ).toBe(401);
    // Signed in, but a forged CSRF token, then the right one from another origin.
    const signIn = await signInHere({ next: '/outbox' });
    expect(signIn.status).toBe(303);
    const session = { cookie: signIn.cookie };
    expect(signIn.cookie).toContain('=');
    const forged = await send(
      'POST',
      '/outbox/retry',
      { ...post, ...urlencoded, ...session },
      `_csrf=forged&id=${id}`,
    );
    expect(forged.status).toBe(403);
    const page = await send('GET', '/outbox', { ...host, ...session });
    const csrf = /name="_csrf" value="([^"]+)"/.exec(page.text)?.[1];
    expect(csrf).toBeTruthy();
    const elsewhere = await send(
      'POST',
      '/outbox/retry',
      { ...post, ...urlencoded, ...session, origin: 'https://evil.example' },
      `_csrf=${csrf}&id=${id}`,
    );
    expect(elsewhere.status).toBe(403);
    expect(await isDead()).toBe(true); // none of those changed anything

    // The same session, form and origin as the page: sent again.
    const sent = await send(
      'POST',
      '/outbox/retry',
      { ...post, ...urlencoded, ...session },
      `_csrf=${csrf}&id=${id}&return=/outbox`,
    );
    expect(sent.status).toBe(303);
    expect(sent.location).toContain('notice=outbox_retried');
    expect(await isDead()).toBe(false);
  });

  it('outbox: a topic no relay serves is listed first, and its oldest message is killed only by an operator with a right to it', async () => {
    const ok: Sink = {
      name: 'ok',
      deliver: async (messages) => messages.map(() => ({ ok: true as const })),
      close: async () => {},
    };
    const [retired, held] = await publishMany(db.pool, [
      { topic: 'retired.topic', key: 'order-9', payload: { n: 1 } },
      { topic: 'orders', key: 'order-9', payload: { n: 2 } },
      { topic: 'orders', key: 'order-10', payload: { n: 3 } },
    ]);
    const relay = createRelay({ pool: db.pool, sink: ok, logger: silent, topics: ['orders'] });
    await relay.runOnce();
    await relay.runOnce();
    const status = async (id: string) =>
      (
        await db.pool.query<{ status: string; last_error: string | null }>(
          'SELECT status::text, last_error FROM skiplock.outbox_messages WHERE id = $1',
          [id],
        )
      ).rows[0];
    expect(await status(held!)).toMatchObject({ status: 'pending' });

    const host = { host: `127.0.0.1:${port}` };
    const shown = await send('GET', '/outbox', host);
    const rows = [...shown.text.matchAll(/<tr data-topic="([^"]+)">([\s\S]*?)<\/tr>/g)];
    const mine = rows.filter((m) => m[1] === 'retired.topic' || m[1] === 'orders');
    expect(mine.map((m) => m[1])).toEqual(['retired.topic', 'orders']);
    expect(mine[0]![2]).toContain(`>${retired}<`);
    expect(mine[0]![2]).toContain('order-9');
    // Signed out: no kill form.
    expect(shown.text).not.toContain('/outbox/kill');

    const post = { ...host, origin: `http://127.0.0.1:${port}` };
    const urlencoded = { 'content-type': 'application/x-www-form-urlencoded' };
    const body = `id=${retired}&reason=topic+retired`;
    expect((await send('POST', '/outbox/kill', { ...post, ...urlencoded }, body)).status).toBe(401);
    const wrongToken = {
      authorization: 'Bearer not-the-operator-token',
      'x-skiplock-operator': 'ada',
    };
    expect(
      (await send('POST', '/outbox/kill', { ...post, ...urlencoded, ...wrongToken }, body)).status,
    ).toBe(401);
    const readOnly = createDashboard({ pool: db.pool, token, readOnly: true, logger: silent });
    const readOnlyServed = await serve(readOnly);
    try {
      const refused = await operatorPost(`${readOnlyServed.url}/outbox/kill`, token, body);
      expect(refused.status).toBe(403);
    } finally {
      await readOnlyServed.close();
      await readOnly.close();
    }
    const signIn = await signInHere({ next: '/outbox' });
    const session = { cookie: signIn.cookie };
    expect(
      (
        await send(
          'POST',
          '/outbox/kill',
          { ...post, ...urlencoded, ...session },
          `_csrf=forged&${body}`,
        )
      ).status,
    ).toBe(403);
    const page = await send('GET', '/outbox', { ...host, ...session });
    const csrf = /name="_csrf" value="([^"]+)"/.exec(page.text)?.[1];
    expect(page.text).toMatch(
      new RegExp(`action="/outbox/kill"[\\s\\S]*?name="id" value="${retired}"`),
    );
    const elsewhere = await send(
      'POST',
      '/outbox/kill',
      { ...post, ...urlencoded, ...session, origin: 'https://evil.example' },
      `_csrf=${csrf}&${body}`,
    );
    expect(elsewhere.status).toBe(403);
    expect(await status(retired!)).toMatchObject({ status: 'pending' }); // none changed anything

    const killed = await send(
      'POST',
      '/outbox/kill',
      { ...post, ...urlencoded, ...session },
      `_csrf=${csrf}&${body}&return=/outbox`,
    );
    expect(killed.status).toBe(303);
    expect(killed.location).toMatch(/^\/outbox\?notice=outbox_killed&/);
    expect(await status(retired!)).toEqual({
      status: 'dead',
      last_error: 'killed by an operator: topic retired (ada)',
    });
    const notice = await send('GET', killed.location!, { ...host, ...session });
    expect(notice.text).toContain('Message killed');
    // The key goes on: its message on `orders` is delivered.
    await relay.runOnce();
    expect(await status(held!)).toMatchObject({ status: 'delivered' });

    // Dead now: not killed again, and the notice says so; a bad id is refused by name.
    const again = await send(
      'POST',
      '/outbox/kill',
      { ...post, ...urlencoded, ...session },
      `_csrf=${csrf}&id=${retired}`,
    );
    expect(again.location).toContain('notice=outbox_not_killed');
    const bad = await send(
      'POST',
      '/outbox/kill',
      { ...post, ...urlencoded, ...session },
      `_csrf=${csrf}&id=order-9`,
    );
    expect(bad.status).toBe(400);
    expect(bad.text).toContain('&quot;order-9&quot; is not a message id');
    await relay.stop();
  });

  it('outbox: past 10,000 pending, the count and the oldest age are shown as lower bounds', async () => {
    const host = { host: `127.0.0.1:${port}` };
    const tile = (text: string, status: string) =>
      new RegExp(`data-testid="outbox-${status}">\\s*<span[^>]*\\bclass="n"[^>]*>([^<]*)<`).exec(
        text,
      )?.[1];
    const before = await send('GET', '/outbox', host);
    expect(tile(before.text, 'pending')).not.toContain('+');
    const many = (n: number) =>
      Array.from({ length: n }, (_, i) => ({ topic: 'bulk', key: `k${i % 100}`, payload: i }));
    await publishMany(db.pool, many(10_000));
    await publishMany(db.pool, many(1));
    const after = await send('GET', '/outbox', host);
    expect(tile(after.text, 'pending')).toBe('10,000+');
    expect(tile(after.text, 'oldest')).toMatch(/^\d.*\+$/);
    expect(tile(after.text, 'delivered')).not.toContain('+');
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
    const auth = operatorForm;
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
