import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createSagaRuntime, defineSaga } from '@skiplock/saga';
import { createDashboard } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { serve, operatorPost } from './support.js';

const order = defineSaga({ name: 'order', version: 1, input: z.object({}) })
  .step('reserve', { run: () => ({}), compensate: () => {} })
  .waitFor('paid', { payload: z.object({}) });

const quiet = pino({ level: 'silent' });
const token = 'a-long-random-operator-token-for-tests';
const db = await useTestDatabase();
// Starts sagas only: no worker runs their jobs, so each stays on its first step.
const sagas = createSagaRuntime({ pool: db.pool, sagas: [order], logger: quiet });
const dashboard = createDashboard({ pool: db.pool, token, sagas: [order], logger: quiet });
const served = await serve(dashboard);
afterAll(async () => {
  await served.close();
  await dashboard.close();
  await sagas.close();
});
const words = (html: string) =>
  html
    .replace(/<[^>]+>/g, ' ')
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/\s+/g, ' ');

describe('dashboard: a saga another transaction holds', () => {
  it('refuses cancel, retry and signal with 409 after 5 s, changing nothing', async () => {
    await sagas.start(order, { id: 'held', input: {} });
    const holder = await db.pool.connect();
    try {
      // A producer's start or signal with { tx } in its open transaction holds the row so.
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM skiplock.sagas WHERE id = 'held' FOR UPDATE`);
      // All three at once: each waits its 5 s beside the others. Before, each request waited as
      // long as the holder did: bounded here so that the test fails instead of hanging.
      const began = performance.now();
      const actions = Promise.all([
        operatorPost(`${served.url}/sagas/held/cancel`, token, ''),
        operatorPost(`${served.url}/sagas/held/retry`, token, ''),
        operatorPost(`${served.url}/sagas/held/signal`, token, 'name=paid&payload=%7B%7D'),
      ]);
      const timedOut = new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error('waited for the held saga')), 20_000),
      );
      const [cancel, retry, signal] = await Promise.race([actions, timedOut]);
      // Each gave up after its 5 s wait, not before.
      expect(performance.now() - began).toBeGreaterThan(4_500);
      const held = 'a lock it needs (its row, its lock key';
      expect(cancel.status).toBe(409);
      expect(words(await cancel.text())).toContain(`Cancel refused: saga "held": ${held}`);
      expect(retry.status).toBe(409);
      expect(words(await retry.text())).toContain(`Retry refused: saga "held": ${held}`);
      expect(signal.status).toBe(409);
      expect(words(await signal.text())).toContain(`Signal refused: saga "held": ${held}`);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    expect(await sagas.getSaga('held')).toMatchObject({
      status: 'running',
      cancelRequested: false,
    });
  });
});
