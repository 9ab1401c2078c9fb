import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDashboard } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { serve } from './support.js';

const db = await useTestDatabase();
const silent = pino({ level: 'silent' });
const dashboard = createDashboard({ pool: db.pool, logger: silent });
const served = await serve(dashboard);
afterAll(async () => {
  await served.close();
  await dashboard.close();
});
const get = async (path: string) => {
  const res = await fetch(`${served.url}${path}`);
  return { status: res.status, text: await res.text() };
};
/** The count shown on a status chip (overview or saga list). */
const chip = (text: string, status: string) =>
  new RegExp(`chip-${status}[^>]*>\\s*<span class="n">([^<]*)<`).exec(text)?.[1];

describe('dashboard sagas, many of them', () => {
  beforeAll(async () => {
    // 20,001 finished sagas of v1, and one older of v2 (seeded as rows: the runtime is not needed).
    await db.pool.query(
      `INSERT INTO skiplock.sagas (id, name, version, status, input, created_at, updated_at)
       SELECT 'bulk-' || i, 'bulk', 1, 'completed', '{}', now() - interval '1 second' * (20001 - i),
              now()
       FROM generate_series(1, 20001) i`,
    );
    await db.pool.query(
      `INSERT INTO skiplock.sagas (id, name, version, status, input, created_at, updated_at)
       VALUES ('old-v2', 'bulk', 2, 'completed', '{}', now() - interval '1 day', now())`,
    );
  });

  it('counts past the cap read 10,000+, as the queue counts do', async () => {
    const overview = await get('/');
    expect(chip(overview.text, 'completed')).toBe('10,000+');
    expect(chip(overview.text, 'running')).toBe('0');
    const list = await get('/sagas');
    expect(chip(list.text, 'completed')).toBe('10,000+');
  });

  it('a filter that matched none of the sagas one page looks at says so, and searches on', async () => {
    // v2 is past the 20,000 sagas one page looks at: the page says it stopped, and goes on.
    const v2 = await get('/sagas?version=2');
    expect(v2.status).toBe(200);
    expect(v2.text).not.toContain('No sagas match.');
    expect(v2.text).toContain('No match among the sagas searched so far.');
    expect(v2.text).toContain('without filling the page: search older');
    const older = /href="([^"]+)" data-testid="older"/.exec(v2.text)?.[1]?.replace(/&amp;/g, '&');
    expect(older).toContain('version=2');
    const next = await get(older!);
    expect(next.text).toContain('data-saga-id="old-v2"');
  });
});
