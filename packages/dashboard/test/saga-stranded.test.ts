import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createSagaRuntime, defineSaga } from '@skiplock/saga';
import { createDashboard } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { serve, operatorPost } from './support.js';

const order = defineSaga({ name: 'order', version: 1, input: z.object({}) })
  .step('reserve', { run: () => ({}), compensate: () => {} })
  .step('charge', { run: () => ({}) });

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
/** The page's words: tags out, quotes decoded, no space inside parentheses. */
const text = (html: string) =>
  html
    .replace(/<[^>]+>/g, ' ')
    .replace(/&quot;/g, '"')
    .replace(/\s+/g, ' ')
    .replace(/\( /g, '(')
    .replace(/ \)/g, ')');
const page = async (path: string) => text(await (await fetch(`${served.url}${path}`)).text());

describe('dashboard: a saga stranded on a job that died unseen', () => {
  it('its page says it is stranded, on which job, and what moves it', async () => {
    await sagas.start(order, { id: 'dead-one', input: {} });
    await sagas.start(order, { id: 'gone-one', input: {} });
    await sagas.start(order, { id: 'fine-one', input: {} });
    const jobOf = async (id: string) => (await sagas.getSaga(id))!.currentJobId!;
    const dead = await jobOf('dead-one');
    const gone = await jobOf('gone-one');
    // As a worker without the saga's job types leaves it: dead, no saga hook ran.
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'dead', attempts = 1,
         last_error = 'unknown job type "saga:order:v1:reserve"' WHERE id = $1`,
      [dead],
    );
    await db.pool.query(`DELETE FROM skiplock.jobs WHERE id = $1`, [gone]);

    // Before: "running", its step "pending", and nothing said it would never move.
    expect(await page('/sagas/dead-one')).toContain(
      `Stranded: job ${dead} is dead (unknown job type "saga:order:v1:reserve"); a saga ` +
        "runtime's reconciler moves it on (skiplock sagas reconcile --module FILE).",
    );
    expect(await page('/sagas/gone-one')).toContain(`Stranded: job ${gone} no longer exists;`);
    expect(await page('/sagas/fine-one')).not.toContain('Stranded');
  });

  it('a cancel of a stranded saga says it waits for a reconciler, not that it compensates now', async () => {
    await sagas.start(order, { id: 'cancel-me', input: {} });
    const job = (await sagas.getSaga('cancel-me'))!.currentJobId!;
    await db.pool.query(`UPDATE skiplock.jobs SET status = 'cancelled' WHERE id = $1`, [job]);
    const res = await operatorPost(`${served.url}/sagas/cancel-me/cancel`, token, '');
    expect(res.status).toBe(303);
    const shown = await page(res.headers.get('location')!);
    expect(shown).toContain('Cancel recorded, but the saga is stranded');
    expect(shown).not.toContain('Cancel accepted');
    expect(shown).toContain(`Stranded: job ${job} is cancelled`);
  });
});
