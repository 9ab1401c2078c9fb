import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, createWorker, defineJob } from '@skiplock/queue';
import { z } from 'zod';
import { createSagaRuntime, defineSaga, readSaga } from '@skiplock/saga';
import { createDashboard } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { order } from './fixtures.js';
import { serve } from './support.js';

const CARD = '4111-1111-1111-1111';
const pay = defineSaga({ name: 'pay', version: 1, input: z.object({ card: z.string() }) })
  .step('quote', { run: () => ({ secretQuote: 'QUOTE-SECRET-42' }) })
  .waitFor('approved', { payload: z.object({ by: z.string() }), timeoutMs: 3_600_000 })
  .parallel('prep', (branch) => ({
    a: branch({ run: () => ({ code: 'BRANCH-SECRET-A' }) }),
    b: branch({ run: () => ({ code: 'shown-b' }) }),
  }));

// A lock key computed from the input it names: redacting the input must hide it too.
const EMAIL = 'jane.doe@example.com';
const locked = defineSaga({
  name: 'locked',
  version: 1,
  input: z.object({ email: z.string() }),
  lockKey: (input) => `customer:${input.email}`,
}).step('charge', { run: () => ({ ok: true }) });

const quiet = pino({ level: 'silent' });
const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });
const sagas = createSagaRuntime({
  pool: db.pool,
  client,
  sagas: [order, pay, locked],
  logger: quiet,
});
const worker = createWorker({ pool: db.pool, jobs: sagas.jobs, logger: quiet, pollIntervalMs: 50 });
const asked: string[] = [];
const dashboard = createDashboard({
  pool: db.pool,
  sagas: [order, pay, locked],
  logger: quiet,
  // Who approved an order is personal data: signal payloads never reach the page. So are pay's
  // card number (its input), its quote (a step's output) and branch a's part of the group's output.
  redact: (what, value) => {
    asked.push(what);
    if (what === 'saga:pay:input' || what === 'saga:locked:input') return { card: 'hidden' };
    if (what === 'saga:pay:quote:output') return { hidden: true };
    if (what === 'saga:pay:prep:output') return { ...(value as object), a: 'hidden' };
    if (what === 'saga:pay:signal:approved') return { by: 'hidden' };
    return what.startsWith('saga:order:signal:') ? { by: 'hidden' } : value;
  },
});
const served = await serve(dashboard);
afterAll(async () => {
  await served.close();
  await worker.stop();
  await dashboard.close();
  await sagas.close();
  await client.close();
});

describe('dashboard redaction of sagas', () => {
  beforeAll(() => worker.start());

  it('a signal payload redacted as a signal is not shown as its wait step output', async () => {
    await sagas.start(order, { id: 'o1', input: { orderId: 'o1' } });
    const status = async () => (await readSaga(db.pool, 'o1'))?.status;
    await waitFor(async () => (await status()) === 'waiting', { what: 'o1 waiting' });
    await sagas.signal('o1', 'approved', { by: 'secret-approver' });
    await waitFor(async () => (await status()) === 'completed', { what: 'o1 completed' });

    const res = await fetch(`${served.url}/sagas/o1`);
    const text = await res.text();
    expect(res.status).toBe(200);
    // The signal's own row and the wait step that took it both show what redact left.
    expect(text).toContain('data-kind="signal"');
    expect(text).toContain('data-kind="wait"');
    expect(text).not.toContain('secret-approver');
    expect(text).toContain('hidden');
    expect(asked).toContain('saga:order:signal:approved');

    // A dashboard not given the definition shows the wait as a step: its output is hidden too.
    const blind = createDashboard({
      pool: db.pool,
      logger: quiet,
      redact: (what, value) => (what.startsWith('saga:order:signal:') ? { by: 'hidden' } : value),
    });
    const blindServed = await serve(blind);
    try {
      const page = await (await fetch(`${blindServed.url}/sagas/o1`)).text();
      expect(page).toContain('data-kind="signal"');
      expect(page).not.toContain('secret-approver');
    } finally {
      await blindServed.close();
      await blind.close();
    }
  }, 60_000);

  it("a parallel branch's page hides what its parent's redaction hides", async () => {
    await sagas.start(pay, { id: 'p1', input: { card: CARD } });
    await waitFor(async () => (await readSaga(db.pool, 'p1'))?.status === 'waiting', {
      what: 'p1 waiting',
    });
    await sagas.signal('p1', 'approved', { by: 'APPROVER-SECRET' });
    await waitFor(async () => (await readSaga(db.pool, 'p1'))?.status === 'completed', {
      what: 'p1 completed',
    });
    const parent = await (await fetch(`${served.url}/sagas/p1`)).text();
    const secrets = [CARD, 'QUOTE-SECRET-42', 'BRANCH-SECRET-A', 'APPROVER-SECRET'];
    expect(secrets.filter((s) => parent.includes(s))).toEqual([]);
    expect(parent).toContain('shown-b');
    const children = (await readSaga(db.pool, 'p1'))!.children.map((c) => c.id);
    expect(children).toEqual(['p1/prep/a', 'p1/prep/b']);
    const pages = await Promise.all(
      children.map(async (id) => {
        const res = await fetch(`${served.url}/sagas/${encodeURIComponent(id)}`);
        expect(res.status).toBe(200);
        return res.text();
      }),
    );
    // Before: each branch's page showed the card and the quote (its stored input carries the
    // parent's input and outputs), and branch a's its own output, asked as pay.prep.a's only.
    for (const page of pages) expect(secrets.filter((s) => page.includes(s))).toEqual([]);
    // Without the parent's definition a step's output is asked as a signal of its name too.
    const blind = createDashboard({
      pool: db.pool,
      logger: quiet,
      redact: (what, value) => (what === 'saga:pay:signal:approved' ? 'hidden' : value),
    });
    const blindServed = await serve(blind);
    try {
      const page = await (await fetch(`${blindServed.url}/sagas/p1%2Fprep%2Fb`)).text();
      expect(page).toContain('shown-b');
      expect(page).not.toContain('APPROVER-SECRET');
    } finally {
      await blindServed.close();
      await blind.close();
    }
    expect(pages[1]).toContain('shown-b');
    expect(asked).toContain('saga:pay.prep.a:input');
  }, 60_000);

  it("hides a saga's lock key while its input is redacted, and asks redact about it by name", async () => {
    await sagas.start(locked, { id: 'lk1', input: { email: EMAIL } });
    expect((await readSaga(db.pool, 'lk1'))?.lockKey).toBe(`customer:${EMAIL}`);
    const lockKeyCell = async (url: string) => {
      const text = await (await fetch(`${url}/sagas/lk1`)).text();
      return /<th>lock key<\/th>\s*<td>\s*([\s\S]*?)\s*<\/td>/.exec(text)?.[1];
    };
    // Before: the Fields table showed customer:jane.doe@example.com beside the redacted input.
    expect(await lockKeyCell(served.url)).toBe('<span class="none">hidden</span>');
    expect(asked).toContain('saga:locked:lockKey');
    // Its own answer is shown; with nothing redacted the key shows as it is.
    for (const [redact, cell] of [
      [
        (what: string, value: unknown) => (what === 'saga:locked:lockKey' ? 'customer:j…' : value),
        'customer:j…',
      ],
      [(_what: string, value: unknown) => value, `customer:${EMAIL}`],
    ] as const) {
      const other = createDashboard({ pool: db.pool, logger: quiet, sagas: [locked], redact });
      const otherServed = await serve(other);
      try {
        expect(await lockKeyCell(otherServed.url)).toBe(cell);
      } finally {
        await otherServed.close();
        await other.close();
      }
    }
  });

  it("hides a job's keys, often made from its payload, while the payload is hidden or redacted", async () => {
    const tenantJob = defineJob({
      type: 'tenant-sync',
      queue: 'tenant-sync',
      payload: z.object({ email: z.string() }),
      concurrencyKey: (p) => `tenant:${p.email}`,
      singletonKey: (p) => `sync:${p.email}`,
      handler: () => {},
    });
    const { id } = await client.enqueue(
      tenantJob,
      { email: EMAIL },
      { idempotencyKey: `signup:${EMAIL}` },
    );
    const pageOf = async (options: Partial<Parameters<typeof createDashboard>[0]>) => {
      const board = createDashboard({ pool: db.pool, logger: quiet, ...options });
      const boardServed = await serve(board);
      try {
        // A lookup by the key: where it lands says whether a job has it.
        const lookup = await fetch(
          `${boardServed.url}/jobs?q=${encodeURIComponent(`signup:${EMAIL}`)}`,
          { redirect: 'manual' },
        );
        return {
          text: await (await fetch(`${boardServed.url}/jobs/${id}`)).text(),
          found: lookup.headers.get('location'),
        };
      } finally {
        await boardServed.close();
        await board.close();
      }
    };
    // Before: the three keys showed the address in full beside a hidden or redacted payload.
    for (const options of [
      { hidePayloads: true },
      {
        redact: (type: string, value: unknown) =>
          type === 'tenant-sync' ? { email: 'hidden' } : value,
      },
    ]) {
      const page = await pageOf(options);
      expect(page.text).toContain('data-testid="job-fields"');
      expect(page.text).not.toContain(EMAIL);
      // Before: the lookup landed on the job, confirming the hidden key.
      expect(page.found).toBeNull();
    }
    const whole = await pageOf({});
    for (const key of [`signup:${EMAIL}`, `tenant:${EMAIL}`, `sync:${EMAIL}`]) {
      expect(whole.text).toContain(key);
    }
    expect(whole.found).toBe(`/jobs/${id}`);
  });
});
