import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { createClient, createWorker } from '@skiplock/queue';
import { createSagaRuntime, readSaga } from '@skiplock/saga';
import { createDashboard } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { order } from './fixtures.js';
import { serve } from './support.js';

const quiet = pino({ level: 'silent' });
const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });
const sagas = createSagaRuntime({ pool: db.pool, client, sagas: [order], logger: quiet });
const worker = createWorker({ pool: db.pool, jobs: sagas.jobs, logger: quiet, pollIntervalMs: 50 });
const asked: string[] = [];
const dashboard = createDashboard({
  pool: db.pool,
  sagas: [order],
  logger: quiet,
  // Who approved an order is personal data: signal payloads never reach the page.
  redact: (what, value) => {
    asked.push(what);
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
  it('a signal payload redacted as a signal is not shown as its wait step output', async () => {
    await worker.start();
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
});
