import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { createDashboard } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { serve } from './support.js';

const db = await useTestDatabase();
const dashboard = createDashboard({ pool: db.pool, logger: pino({ level: 'silent' }) });
const served = await serve(dashboard);
afterAll(async () => {
  await served.close();
  await dashboard.close();
});
/** The number an overview tile shows. */
const tile = (text: string, name: string) =>
  new RegExp(`data-testid="tile-${name}"\\s*><span class="n">([^<]*)<`).exec(text)?.[1];

describe('dashboard overview, past the cap', () => {
  it('tiles of counts read across queues stop at 10,000+; expired leases stay exact', async () => {
    // 10,001 jobs processing in two queues (read as rows: no worker needed), 3 of them with
    // leases run out, and 10,001 dead ones.
    await db.pool.query(
      `INSERT INTO skiplock.jobs (queue, job_type, status, attempts, locked_by, locked_at,
                                  lease_expires_at)
       SELECT CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END, 't', 'processing', 1, 'w', now(),
              now() + CASE WHEN i <= 3 THEN interval '-1 minute' ELSE interval '10 minutes' END
       FROM generate_series(1, 10001) i`,
    );
    await db.pool.query(
      `INSERT INTO skiplock.jobs (queue, job_type, status, attempts)
       SELECT CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END, 't', 'dead', 1
       FROM generate_series(1, 10001) i`,
    );
    const text = await (await fetch(`${served.url}/`)).text();
    expect(tile(text, 'processing')).toBe('10,000+');
    expect(tile(text, 'dead')).toBe('10,000+');
    expect(tile(text, 'expired-leases')).toBe('3');
  });
});
