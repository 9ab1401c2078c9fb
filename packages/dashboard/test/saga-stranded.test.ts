import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, createWorker } from '@skiplock/queue';
import { createSagaRuntime, defineSaga } from '@skiplock/saga';
import { createDashboard } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { serve, operatorPost } from './support.js';

const order = defineSaga({ name: 'order', version: 1, input: z.object({}) })
  .step('reserve', { run: () => ({}), compensate: () => {} })
  .step('charge', { run: () => ({}) });
// A timed wait, on a queue of its own so that only its test's worker runs its jobs.
const gate = defineSaga({ name: 'gate', version: 1, input: z.object({}), queue: 'gates' })
  .step('open', { run: () => 1, compensate: () => {} })
  .waitFor('go', { payload: z.object({}), timeoutMs: 60_000 });

const quiet = pino({ level: 'silent' });
const token = 'a-long-random-operator-token-for-tests';
const db = await useTestDatabase();
// Starts sagas only: no worker runs their jobs, so each stays on its first step.
const sagas = createSagaRuntime({ pool: db.pool, sagas: [order], logger: quiet });
const dashboard = createDashboard({ pool: db.pool, token, sagas: [order, gate], logger: quiet });
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

  it("a waiting saga's page names the timeout job that can no longer end its wait", async () => {
    const gates = createSagaRuntime({ pool: db.pool, sagas: [gate], logger: quiet });
    const worker = createWorker({
      pool: db.pool,
      jobs: gates.jobs,
      logger: quiet,
      sweeper: false,
      retention: false,
      listen: false,
    });
    const keyOf = (id: string) => `saga:${id}:timeout:go`;
    const timeoutJob = async (id: string) =>
      (
        await db.pool.query<{ id: string }>(
          `SELECT id::text FROM skiplock.jobs WHERE idempotency_key = $1`,
          [keyOf(id)],
        )
      ).rows[0]!.id;
    try {
      // The deadline makes a deleted timeout job one a definition-free read can tell is missing.
      for (const id of ['gate-cut', 'gate-gone', 'gate-fine']) {
        await gates.start(gate, { id, input: {}, deadlineMs: 60_000 });
        await waitFor(
          async () => {
            await worker.runOnce();
            return (await gates.getSaga(id))?.status === 'waiting';
          },
          { what: `saga ${id} to wait` },
        );
      }
      const cut = await timeoutJob('gate-cut');
      const client = createClient({ pool: db.pool, logger: quiet });
      expect(await client.cancelJob(cut)).toBe(true);
      await client.close();
      await db.pool.query(`DELETE FROM skiplock.jobs WHERE id = $1`, [
        await timeoutJob('gate-gone'),
      ]);

      // Before: only "waiting", as if its timeout would still end the wait.
      expect(await page('/sagas/gate-cut')).toContain(
        `Stranded: its wait's timeout job ${cut} is cancelled; a saga runtime's reconciler moves ` +
          'it on (skiplock sagas reconcile --module FILE).',
      );
      expect(await page('/sagas/gate-gone')).toContain(
        `Stranded: its wait's timeout job (key ${keyOf('gate-gone')}) no longer exists;`,
      );
      expect(await page('/sagas/gate-fine')).not.toContain('Stranded');
    } finally {
      await worker.stop({ timeoutMs: 1_000 });
      await gates.close();
    }
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
