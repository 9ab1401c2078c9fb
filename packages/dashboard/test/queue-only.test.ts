import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { createDashboard } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { serve, operatorPost } from './support.js';
import { order } from './fixtures.js';

// A database where only the queue was migrated: the saga's tables are dropped from this file's own.
const db = await useTestDatabase();
await db.pool.query(
  'DROP TABLE skiplock.saga_signals, skiplock.saga_steps, skiplock.sagas CASCADE',
);
const silent = pino({ level: 'silent' });
const token = 'a-long-random-operator-token-for-tests';
const dashboard = createDashboard({ pool: db.pool, token, sagas: [order], logger: silent });
const served = await serve(dashboard);
afterAll(async () => {
  await served.close();
  await dashboard.close();
});

describe('dashboard on a database without the saga tables', () => {
  it('the saga pages and actions say the tables are missing, not that the dashboard failed', async () => {
    const overview = await fetch(`${served.url}/`);
    expect(overview.status).toBe(200);
    expect(await overview.text()).toContain('The saga tables do not exist in this database.');
    for (const path of ['/sagas', '/sagas?status=running', '/sagas/some-saga']) {
      const res = await fetch(`${served.url}${path}`);
      const text = await res.text();
      expect(res.status, path).not.toBe(500);
      expect(text, path).toContain('The saga tables do not exist in this database');
    }
    const cancel = await operatorPost(`${served.url}/sagas/some-saga/cancel`, token, '');
    expect(cancel.status).toBe(409);
    expect(await cancel.text()).toContain('The saga tables do not exist in this database');
  });
});
