import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, createWorker, type JobStatus } from '@skiplock/queue';
import { createRelay, publishMany, type Sink } from '@skiplock/outbox';
import { createSagaRuntime, readSaga, type SagaStatus } from '@skiplock/saga';
import { createDashboard } from '../src/index.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { chromiumAvailable, launchChromium } from './chromium.js';
import { charge, dispatch, gate, order, refund, sendMail } from './fixtures.js';
import { serve, type Served } from './support.js';

// The dashboard end to end: a real database seeded by a real worker and saga runtime, served by
// node:http, clicked through by Debian's Chromium (playwright-core, no browser download).

const TOKEN = 'test-operator-token-5f1c';
/**
 * The card number in the payloads, checked for whole: its first four digits also turn up in log
 * timestamps (epoch ms 1796424241662, in a CI run), so a check for "4242" alone failed there.
 */
const CARD = '4242424242424242';
const quiet = pino({ level: 'silent' });
const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });
const sagas = createSagaRuntime({
  pool: db.pool,
  client,
  sagas: [order, refund, dispatch],
  logger: quiet,
});
const worker = createWorker({
  pool: db.pool,
  jobs: [sendMail, charge, ...sagas.jobs],
  logger: quiet,
  pollIntervalMs: 100,
});
const logs = captureLogs();
const dashboard = createDashboard({
  pool: db.pool,
  token: TOKEN,
  sagas: [order, refund, dispatch],
  logger: logs.logger,
  liveIntervalMs: 300,
  // Card numbers never reach the page.
  redact: (type, value) =>
    type === 'charge-card' ? { ...(value as object), cardNumber: '•••• redacted' } : value,
});
let served: Served;
let browser: Browser;
let context: BrowserContext;
let page: Page;
const deadIds: string[] = [];

const jobStatus = async (id: string) => (await client.getJob(id))?.status;
const sagaStatus = async (id: string) => (await readSaga(db.pool, id))?.status;
async function waitForJob(id: string, status: JobStatus) {
  await waitFor(async () => (await jobStatus(id)) === status, { what: `job ${id} ${status}` });
}
async function waitForSaga(id: string, status: SagaStatus) {
  await waitFor(async () => (await sagaStatus(id)) === status, {
    what: `saga ${id} ${status}`,
    timeoutMs: 30_000,
  });
}
const text = async (selector: string) =>
  ((await page.locator(selector).textContent()) ?? '').trim();
const rows = (selector: string) => page.locator(selector).count();

async function signIn(p: Page, operator: string, token: string) {
  await p.goto(`${served.url}/sign-in`);
  await p.fill('input[name=operator]', operator);
  await p.fill('input[name=token]', token);
  await Promise.all([p.waitForLoadState(), p.click('form.sign-in button[type=submit]')]);
}

const chromiumHere = chromiumAvailable();

beforeAll(async () => {
  if (!chromiumHere) return;
  await worker.start();
  await client.enqueueMany(
    sendMail,
    Array.from({ length: 60 }, (_, i) => ({ payload: { to: `user${i}@example.com` } })),
  );
  for (let i = 0; i < 6; i++) {
    const { id } = await client.enqueue(
      charge,
      { invoiceId: `inv_${i}`, cardNumber: CARD },
      { idempotencyKey: `charge:inv_${i}` },
    );
    deadIds.push(id);
  }
  for (const id of ['order-done', 'order-wait', 'order-cancel']) {
    await sagas.start(order, { id, input: { orderId: id } });
  }
  await sagas.start(refund, { id: 'refund-stuck', input: { refundId: 'r1' } });
  await sagas.start(dispatch, { id: 'dispatch-failed', input: { parcelId: 'p1' } });
  for (const id of ['order-done', 'order-wait', 'order-cancel']) await waitForSaga(id, 'waiting');
  await sagas.signal('order-done', 'approved', { by: 'seed' });
  await waitForSaga('order-done', 'completed');
  await waitForSaga('refund-stuck', 'compensating');
  await waitForSaga('dispatch-failed', 'failed');
  for (const id of deadIds) await waitForJob(id, 'dead');
  served = await serve(dashboard);
  browser = await launchChromium();
  context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await context.newPage();
  page.on('dialog', (dialog) => void dialog.accept());
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await served?.close();
  await worker.stop();
  await dashboard.close();
  await sagas.close();
  await client.close();
});

describe.skipIf(!chromiumHere)('the dashboard in Chromium', () => {
  it('overview: each queue by state, dead jobs, sagas by status, workers and the chart', async () => {
    await page.goto(`${served.url}/`);
    expect(await page.title()).toBe('Overview · skiplock');
    const billing = page.locator('[data-testid=queues] tr[data-queue=billing]');
    expect((await billing.locator('td').nth(5).textContent())?.trim()).toBe('6');
    // The six charges, and the refund's and the dispatch's steps that failed for good.
    expect(await text('[data-testid=tile-dead] .n')).toBe('8');
    const chips = await text('[data-testid=saga-counts]');
    expect(chips).toMatch(/2\s+waiting/);
    expect(chips).toMatch(/1\s+compensating/);
    expect(chips).toMatch(/1\s+completed/);
    expect(await rows('[data-testid=workers] tbody tr')).toBeGreaterThanOrEqual(1);
    expect(Number(await text('[data-testid=completed-hour]'))).toBeGreaterThanOrEqual(60);
    // The dead count links to the dead jobs of that queue.
    await Promise.all([
      page.waitForURL(/status=dead/),
      billing.locator('a[href*="status=dead"]').click(),
    ]);
    expect(await rows('[data-testid=jobs] tbody tr')).toBe(6);
  });

  it('jobs: filters by queue, state and type, pages newest first, looks up by id and key', async () => {
    await page.goto(`${served.url}/jobs`);
    await page.fill('[data-testid=job-filters] input[name=queue]', 'mail');
    await page.selectOption('[data-testid=job-filters] select[name=status]', 'completed');
    await Promise.all([
      page.waitForURL(/queue=mail/),
      page.click('[data-testid=job-filters] button'),
    ]);
    expect(await rows('[data-testid=jobs] tbody tr')).toBe(50);
    const firstPage = await page
      .locator('[data-testid=jobs] tbody tr')
      .evaluateAll((trs) => trs.map((tr) => Number(tr.getAttribute('data-job-id'))));
    expect(firstPage).toEqual([...firstPage].sort((a, b) => b - a));
    await Promise.all([page.waitForURL(/before=/), page.click('[data-testid=older]')]);
    const secondPage = await page
      .locator('[data-testid=jobs] tbody tr')
      .evaluateAll((trs) => trs.map((tr) => Number(tr.getAttribute('data-job-id'))));
    expect(secondPage).toHaveLength(10);
    expect(Math.max(...secondPage)).toBeLessThan(Math.min(...firstPage));
    expect(await text('[data-testid=paging]')).toContain('no older jobs');

    await page.goto(`${served.url}/jobs?type=charge-card`);
    const statuses = await page
      .locator('[data-testid=jobs] tbody tr')
      .evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-status')));
    expect(statuses).toEqual(Array(6).fill('dead'));

    // Look up by id, then by idempotency key: each lands on the job's page.
    await page.fill('[data-testid=lookup]', deadIds[0]!);
    await Promise.all([
      page.waitForURL(`**/jobs/${deadIds[0]}`),
      page.press('[data-testid=lookup]', 'Enter'),
    ]);
    await page.goto(`${served.url}/jobs`);
    await page.fill('[data-testid=lookup]', 'charge:inv_1');
    await Promise.all([page.waitForURL(/q=charge/), page.press('[data-testid=lookup]', 'Enter')]);
    // Its payload is redacted, so its page hides its key, and the lookup does not confirm it.
    expect(await text('[data-testid=no-jobs]')).toContain('No job found');
    // A saga's job's key names its saga and step only: looked up, it lands on the job.
    const sagaJob = (await readSaga(db.pool, 'order-done'))!.history[0]!.jobId!;
    await page.fill('[data-testid=lookup]', 'saga:order-done:reserve');
    await Promise.all([
      page.waitForURL(`**/jobs/${sagaJob}`),
      page.press('[data-testid=lookup]', 'Enter'),
    ]);
    await page.goto(`${served.url}/jobs/${deadIds[1]}`);
    expect(await text('[data-testid=job-fields]')).toContain('card declined');
    // The redact option hid the card number; the rest of the payload is there.
    const payload = await text('[data-testid=payload]');
    expect(payload).toContain('inv_1');
    expect(payload).not.toContain(CARD);
    expect(await text('[data-testid=job-timeline]')).toMatch(/attempt failed\s*1\s*non_retryable/);
  });

  it('refuses changes without the operator token', async () => {
    await page.goto(`${served.url}/jobs/${deadIds[0]}`);
    expect(await rows('[data-testid=job-actions] button')).toBe(0);
    expect(await text('main')).toContain('Sign in with the operator token');
    // A POST without a session, from the page itself (right origin, no token): refused.
    const refused = await page.evaluate(async (url) => {
      const response = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: '_csrf=x',
      });
      return response.status;
    }, `${served.url}/jobs/${deadIds[0]}/retry`);
    expect(refused).toBe(401);
    // A bearer token that is not the token: refused too.
    const bearer = await fetch(`${served.url}/jobs/${deadIds[0]}/retry`, {
      method: 'POST',
      headers: {
        authorization: 'Bearer not-the-token',
        'x-skiplock-operator': 'mallory',
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: '',
    });
    expect(bearer.status).toBe(401);
    await signIn(page, 'mallory', 'wrong-token-123');
    expect(await text('[data-testid=sign-in-error]')).toContain('not the operator token');
    expect(await jobStatus(deadIds[0]!)).toBe('dead');
    expect(logs.reasons()).toContain('dashboard_token_refused');
    expect(logs.reasons()).toContain('dashboard_sign_in_refused');
  });

  it('retries a dead job, and the database shows it ran', async () => {
    await signIn(page, 'ann', TOKEN);
    expect(await text('header .who')).toBe('ann');
    gate.failCharges = false;
    await page.goto(`${served.url}/jobs/${deadIds[0]}`);
    await Promise.all([
      page.waitForURL(/notice=job_retried/),
      page.click('[data-testid=job-actions] button:has-text("Retry now")'),
    ]);
    expect(await text('[data-testid=notice]')).toContain('Job retried');
    await waitForJob(deadIds[0]!, 'completed');
    // The open page follows the job to completed without a reload.
    await page.waitForSelector('[data-live=job-head] .badge-completed');
    const line = logs.lines.find((l) => l.reason === 'dashboard_job_retry');
    expect(line).toMatchObject({ operator: 'ann', jobId: deadIds[0], changed: true });
    // Neither the token nor any payload is ever logged.
    const everything = JSON.stringify(logs.lines);
    expect(everything).not.toContain(TOKEN);
    expect(everything).not.toContain(CARD);
  });

  it('retries and discards dead jobs in bulk', async () => {
    gate.failCharges = true;
    await page.goto(`${served.url}/jobs?status=dead&queue=billing`);
    expect(await rows('[data-testid=jobs] tbody tr')).toBe(5);
    await page.check(`input[name=id][value="${deadIds[1]}"]`);
    await page.check(`input[name=id][value="${deadIds[2]}"]`);
    await Promise.all([
      page.waitForURL(/notice=bulk_discarded/),
      page.click('[data-testid=bulk-discard]'),
    ]);
    expect(await text('[data-testid=notice]')).toContain('2 dead jobs discarded');
    expect(await client.getJob(deadIds[1]!)).toBeNull();
    expect(await client.getJob(deadIds[2]!)).toBeNull();
    expect(await rows('[data-testid=jobs] tbody tr')).toBe(3);
    gate.failCharges = false;
    await page.check('input[data-select-all]');
    await Promise.all([
      page.waitForURL(/notice=bulk_retried/),
      page.click('[data-testid=bulk-retry]'),
    ]);
    expect(await text('[data-testid=notice]')).toContain('3 dead jobs retried');
    for (const id of deadIds.slice(3)) await waitForJob(id, 'completed');
    expect(logs.lines.find((l) => l.reason === 'dashboard_jobs_bulk_retry')).toMatchObject({
      operator: 'ann',
      requested: 3,
    });
  });

  it('outbox: messages by status, the dead ones with why, sent again by an operator', async () => {
    // A sink that refuses bounced mail for good until the cause is "fixed".
    let bouncing = true;
    const sink: Sink = {
      name: 'test',
      deliver: async (messages) =>
        messages.map((m) =>
          bouncing && m.topic === 'mail.bounce'
            ? { ok: false, error: 'mailbox unknown', permanent: true }
            : { ok: true },
        ),
      close: async () => {},
    };
    const relay = createRelay({ pool: db.pool, sink, logger: quiet });
    const relayAll = async () => {
      for (let pass = 0; pass < 20 && (await relay.runOnce()).claimed > 0; pass++);
    };
    const published = await publishMany(db.pool, [
      ...Array.from({ length: 4 }, (_, i) => ({ topic: 'mail.sent', key: `u${i}`, payload: i })),
      ...Array.from({ length: 3 }, (_, i) => ({
        topic: 'mail.bounce',
        key: `b${i}`,
        payload: { card: CARD },
      })),
    ]);
    const bounced = published.slice(4);
    await relayAll();
    await publishMany(db.pool, [{ topic: 'mail.later', key: 'later', payload: 0 }]);

    // Not signed in (a context of its own): counts and dead messages, no way to change them.
    const visitor = await context.browser()!.newContext();
    const look = await visitor.newPage();
    await look.goto(`${served.url}/outbox`);
    expect(await look.locator('[data-testid=dead-messages] tbody tr').count()).toBe(3);
    expect(await look.locator('input[name=id]').count()).toBe(0);
    expect(await look.locator('main').textContent()).toContain('Sign in with the operator token');
    await visitor.close();

    await page.goto(`${served.url}/outbox`);
    expect(await text('[data-testid=outbox-pending] .n')).toBe('1');
    expect(await text('[data-testid=outbox-delivered] .n')).toBe('4');
    expect(await text('[data-testid=outbox-dead] .n')).toBe('3');
    expect(await text('[data-testid=outbox-oldest] .n')).toMatch(/ms|s$/);
    const shown = await page
      .locator('[data-testid=dead-messages] tbody tr')
      .evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-message-id')));
    expect(shown).toEqual([...bounced].reverse()); // newest first
    expect(await text('[data-testid=dead-messages]')).toContain('mailbox unknown');
    expect(await text('main')).not.toContain(CARD); // payloads are not shown

    bouncing = false;
    await page.check(`input[name=id][value="${bounced[0]}"]`);
    await page.check(`input[name=id][value="${bounced[1]}"]`);
    await Promise.all([
      page.waitForURL(/notice=outbox_retried/),
      page.click('[data-testid=outbox-retry]'),
    ]);
    expect(await text('[data-testid=notice]')).toContain('2 dead messages sent again');
    expect(await rows('[data-testid=dead-messages] tbody tr')).toBe(1);
    const { rows: statuses } = await db.pool.query<{ id: string; status: string }>(
      `SELECT id::text, status::text FROM skiplock.outbox_messages
       WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [bounced],
    );
    expect(statuses.map((r) => r.status)).toEqual(['pending', 'pending', 'dead']);
    await relayAll();
    // The open page follows: delivered 4 + 2 + the later one, nothing pending, one dead.
    await waitFor(async () => (await text('[data-testid=outbox-delivered] .n')) === '7', {
      what: 'the delivered count refreshed',
    });
    expect(await text('[data-testid=outbox-pending] .n')).toBe('0');
    expect(await text('[data-testid=outbox-dead] .n')).toBe('1');

    // Sending again one that is not dead any more (the page was stale): said, nothing changed.
    const stale = await page.evaluate(
      async ([url, id, csrf]) => {
        const response = await fetch(url!, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: new URLSearchParams({ _csrf: csrf!, id: id! }).toString(),
        });
        return response.url;
      },
      [
        `${served.url}/outbox/retry`,
        bounced[0]!,
        await page.locator('input[name=_csrf]').first().inputValue(),
      ],
    );
    expect(stale).toMatch(/notice=outbox_kept&n=0/);
    const retried = logs.lines.filter((l) => l.reason === 'dashboard_outbox_retry');
    expect(retried).toMatchObject([
      { operator: 'ann', requested: 2 },
      { operator: 'ann', requested: 1, messageIds: [] },
    ]);
    expect((retried[0]!['messageIds'] as string[]).sort()).toEqual(bounced.slice(0, 2).sort());
    expect(JSON.stringify(logs.lines)).not.toContain(CARD);
  });

  it('sagas: filters by definition, version and status; draws the definition', async () => {
    await page.goto(`${served.url}/sagas`);
    expect(await rows('[data-testid=sagas] tbody tr')).toBe(5);
    await page.selectOption('[data-testid=saga-filters] select[name=name]', 'order');
    await page.fill('[data-testid=saga-filters] input[name=version]', '1');
    await page.selectOption('[data-testid=saga-filters] select[name=status]', 'waiting');
    await Promise.all([
      page.waitForURL(/status=waiting/),
      page.click('[data-testid=saga-filters] button'),
    ]);
    const ids = await page
      .locator('[data-testid=sagas] tbody tr')
      .evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-saga-id')).sort());
    expect(ids).toEqual(['order-cancel', 'order-wait']);
    await page.goto(`${served.url}/sagas?version=2`);
    expect(await rows('[data-testid=sagas] tbody tr')).toBe(0);

    await page.goto(`${served.url}/sagas/refund-stuck`);
    expect(await text('[data-live=saga-head] .badge')).toBe('compensating');
    // Steps, the compensation being retried, and the failure with its error.
    const timeline = await text('[data-testid=saga-timeline]');
    expect(timeline).toContain('account closed');
    expect(timeline).toContain('undo hold');
    const diagram = page.locator('[data-testid=saga-diagram]');
    expect(await diagram.locator('[data-node=s1]').getAttribute('data-status')).toBe('failed');
    expect(await diagram.locator('[data-node=c0]').getAttribute('class')).toContain('is-current');
    await page.goto(`${served.url}/sagas/order-done`);
    const nodes = await page
      .locator('[data-testid=saga-diagram] [data-node]')
      .evaluateAll((gs) => gs.map((g) => g.getAttribute('data-node')));
    expect(nodes).toEqual(['start', 's0', 's1', 's2', 's3', 'done', 'c0', 'compensated']);
    expect(await page.locator('[data-testid=saga-diagram] .node-pivot').count()).toBe(1);
    expect(await page.locator('[data-testid=saga-diagram] .node-wait').count()).toBe(1);
  });

  it('cancels a waiting saga, which compensates and ends cancelled', async () => {
    await page.goto(`${served.url}/sagas/order-cancel`);
    await Promise.all([
      page.waitForURL(/notice=saga_cancel_accepted/),
      page.click('[data-testid=saga-actions] button:has-text("Cancel saga")'),
    ]);
    await waitForSaga('order-cancel', 'cancelled');
    const saga = await readSaga(db.pool, 'order-cancel');
    expect(saga?.history.map((h) => `${h.kind}:${h.step}:${h.status}`)).toEqual([
      'step:reserve:completed',
      'step:approved:cancelled',
      'compensation:reserve:completed',
    ]);
    // The open page catches up by itself.
    await page.waitForSelector('[data-live=saga-head] .badge-cancelled');
    await page.waitForSelector(
      '[data-testid=saga-timeline] tr[data-kind=compensation][data-status=completed]',
    );
    expect(logs.lines.find((l) => l.reason === 'dashboard_saga_cancel')).toMatchObject({
      operator: 'ann',
      sagaId: 'order-cancel',
      accepted: true,
    });
  });

  it('a signal resumes a waiting saga; a payload its schema refuses is shown why', async () => {
    await page.goto(`${served.url}/sagas/order-wait`);
    await page.fill('[data-testid=signal-form] textarea[name=payload]', '{"by": 42}');
    await page.click('[data-testid=signal-form] button');
    await page.waitForSelector('[data-testid=action-error]');
    expect(await text('[data-testid=action-error]')).toContain('Signal refused');
    expect(await sagaStatus('order-wait')).toBe('waiting');
    await page.goto(`${served.url}/sagas/order-wait`);
    await page.fill('[data-testid=signal-form] textarea[name=payload]', '{"by": "ann"}');
    await Promise.all([
      page.waitForURL(/notice=signal_resumed/),
      page.click('[data-testid=signal-form] button'),
    ]);
    await waitForSaga('order-wait', 'completed');
    await page.waitForSelector('[data-live=saga-head] .badge-completed');
    expect(await text('[data-testid=saga-timeline]')).toMatch(/signal\s*approved\s*consumed/);
    expect(logs.lines.find((l) => l.reason === 'dashboard_saga_signal' && l.resumed)).toMatchObject(
      {
        operator: 'ann',
        signal: 'approved',
      },
    );
  });

  it('retries the step that failed a saga past its pivot, and the saga completes', async () => {
    await page.goto(`${served.url}/sagas/dispatch-failed`);
    expect(await text('[data-live=saga-head] .badge')).toBe('failed');
    expect(await text('[data-testid=saga-timeline]')).toContain('mail server down');
    gate.failNotify = false;
    await Promise.all([
      page.waitForURL(/notice=saga_retried/),
      page.click('[data-testid=saga-actions] button:has-text("Retry notify")'),
    ]);
    await waitForSaga('dispatch-failed', 'completed');
    await page.waitForSelector('[data-live=saga-head] .badge-completed');
    expect(logs.lines.find((l) => l.reason === 'dashboard_saga_retry')).toMatchObject({
      operator: 'ann',
      sagaId: 'dispatch-failed',
      retried: true,
      step: 'notify',
    });
  });

  it('refuses a POST with a wrong CSRF token or from another origin, even signed in', async () => {
    const cookies = await context.cookies(served.url);
    const cookie = cookies.map((c) => `${c.name}=${c.value}`).join('; ');
    expect(cookie).toContain('skiplock_dashboard=');
    const post = (headers: Record<string, string>, body: string) =>
      fetch(`${served.url}/jobs/${deadIds[5]}/cancel`, {
        method: 'POST',
        redirect: 'manual',
        headers: { cookie, 'content-type': 'application/x-www-form-urlencoded', ...headers },
        body,
      });
    expect((await post({ origin: served.url }, '_csrf=forged')).status).toBe(403);
    const csrf = await page.locator('input[name=_csrf]').first().inputValue();
    expect((await post({ origin: 'https://evil.example' }, `_csrf=${csrf}`)).status).toBe(403);
    expect(logs.reasons().filter((r) => r === 'dashboard_csrf_refused')).toHaveLength(2);
  });

  it('live: the overview counts change without a reload', async () => {
    await page.goto(`${served.url}/`);
    await page.evaluate(() => ((globalThis as unknown as { marker: number }).marker = 1));
    expect(await page.locator('tr[data-queue=later]').count()).toBe(0);
    await client.enqueue(
      sendMail,
      { to: 'later@example.com' },
      { queue: 'later', delayMs: 3_600_000 },
    );
    await page.waitForSelector('[data-testid=queues] tr[data-queue=later]');
    expect(await text('tr[data-queue=later] td:nth-child(2)')).toBe('1');
    // Still the same document: the count came in by the live refresh, not a navigation.
    expect(await page.evaluate(() => (globalThis as unknown as { marker?: number }).marker)).toBe(
      1,
    );
  });

  it('read-only: no actions shown, every change refused', async () => {
    const readOnly = createDashboard({
      pool: db.pool,
      token: TOKEN,
      readOnly: true,
      logger: quiet,
    });
    const other = await serve(readOnly);
    try {
      const p = await context.newPage();
      await p.goto(`${other.url}/jobs?status=dead`);
      await p.goto(`${other.url}/sagas/refund-stuck`);
      expect(await p.locator('button.danger, button.primary').count()).toBe(0);
      expect(await p.locator('main').textContent()).toContain('Read-only');
      const response = await fetch(`${other.url}/jobs/${deadIds[5]}/retry`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TOKEN}`,
          'x-skiplock-operator': 'ann',
          'content-type': 'application/x-www-form-urlencoded',
        },
        body: '',
      });
      expect(response.status).toBe(403);
      await p.close();
    } finally {
      await other.close();
      await readOnly.close();
    }
  });

  it('takes the screenshots of the main pages (docs/ with SKIPLOCK_SCREENSHOTS=1)', async () => {
    const dir = process.env.SKIPLOCK_SCREENSHOTS
      ? fileURLToPath(new URL('../../../docs/', import.meta.url))
      : fileURLToPath(new URL('../../../.tmp/screenshots/', import.meta.url));
    mkdirSync(dir, { recursive: true });
    gate.failCharges = true;
    const { id: deadId } = await client.enqueue(charge, { invoiceId: 'inv_9', cardNumber: '4000' });
    await waitForJob(deadId, 'dead');
    const shots: [string, string][] = [
      ['overview', '/'],
      ['jobs', '/jobs?queue=billing'],
      ['job', `/jobs/${deadId}`],
      ['sagas', '/sagas'],
      ['saga', '/sagas/order-cancel'],
      ['outbox', '/outbox'],
    ];
    for (const [name, path] of shots) {
      await page.goto(`${served.url}${path}`);
      await page.screenshot({ path: `${dir}dashboard-${name}.png`, fullPage: true });
    }
  });
});
