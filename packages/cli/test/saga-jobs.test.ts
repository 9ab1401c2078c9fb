import { NonRetryableError } from '@skiplock/queue';
import { defineSaga } from '@skiplock/saga';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { runInProcess } from './run-cli.js';
import { startSagaWorker } from './saga-worker.js';

const db = await useTestDatabase();
const env = { DATABASE_URL: db.url };

let carrierDown = true;
// Fails after its pivot: the saga is `failed`, its last step's job `dead`, and only the saga's
// own retry can take it on.
const shipment = defineSaga({ name: 'shipment', version: 1, input: z.object({ n: z.number() }) })
  .step('reserve', { run: () => ({ r: 1 }), compensate: () => {} })
  .step('charge', { pivot: true, run: () => ({ c: 1 }) })
  .step('ship', {
    retriable: true,
    run: () => {
      if (carrierDown) throw new NonRetryableError('carrier down');
      return { shipped: true };
    },
  });
// Parks on a durable sleep: its wake job is pending for an hour.
const nap = defineSaga({ name: 'nap', version: 1, input: z.object({}) })
  .step('before', { run: () => ({}) })
  .sleep('rest', 3_600_000);

const { runtime } = await startSagaWorker(db.pool, [shipment, nap]);

const jobOf = async (type: string) =>
  (
    await db.pool.query<{ id: string; status: string }>(
      `SELECT id::text, status FROM skiplock.jobs WHERE job_type = $1 ORDER BY id DESC LIMIT 1`,
      [type],
    )
  ).rows[0]!;

describe('skiplock jobs retry/cancel on a saga job', () => {
  it('refuses a saga step job, which moves only with its saga', async () => {
    await runtime.start(shipment, { id: 'ship:1', input: { n: 1 } });
    await runtime.start(nap, { id: 'nap-1', input: {} });
    await waitFor(
      async () =>
        (await runtime.getSaga('ship:1'))?.status === 'failed' &&
        (await runtime.getSaga('nap-1'))?.status === 'waiting',
      { what: 'the shipment to fail and the nap to sleep' },
    );
    const ship = await jobOf('saga:shipment:v1:ship');
    expect(ship.status).toBe('dead');
    const wake = await jobOf('saga:nap:v1:rest:timeout');
    expect(wake.status).toBe('pending');

    const [retry, cancel] = await Promise.all([
      runInProcess(['jobs', 'retry', ship.id], env),
      runInProcess(['jobs', 'cancel', wake.id], env),
    ]);
    expect(retry.code).toBe(1);
    expect(retry.stderr).toBe(
      `skiplock jobs retry: job ${ship.id} is a step of saga "ship:1" (saga:shipment:v1:ship) ` +
        `and moves only with it; use the saga's retry or cancel (skiplock sagas retry|cancel ` +
        `<id> --module FILE, the saga's page of skiplock dashboard --module FILE, or its ` +
        `runtime's retryFailed or cancel); ` +
        `skiplock sagas show ship:1 shows where it stands\n`,
    );
    expect(cancel.code).toBe(1);
    expect(cancel.stderr).toContain(
      `job ${wake.id} is a step of saga "nap-1" (saga:nap:v1:rest:timeout)`,
    );
    expect((await jobOf('saga:shipment:v1:ship')).status).toBe('dead');
    expect((await jobOf('saga:nap:v1:rest:timeout')).status).toBe('pending');

    carrierDown = false;
    // The saga's own retry still finds its job and finishes the saga.
    expect(await runtime.retryFailed('ship:1')).toMatchObject({ retried: true });
    await waitFor(async () => (await runtime.getSaga('ship:1'))?.status === 'completed', {
      what: 'the retried shipment to complete',
    });
  });
});
