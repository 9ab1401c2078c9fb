import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, createWorker, NonRetryableError } from '@skiplock/queue';
import { createSagaRuntime, defineSaga, readSaga, type SagaStatus } from '@skiplock/saga';
import { createDashboard } from '../src/index.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { rawHttp, serve, operatorPost } from './support.js';

/** Waits for `go`, books (the pivot), then notifies: that fails for good while `failing`. */
let failing = true;
const booking = defineSaga({
  name: 'booking',
  version: 1,
  input: z.object({ account: z.string() }),
  lockKey: (input) => input.account,
})
  .waitFor('go', { payload: z.object({}) })
  .step('book', { pivot: true, run: async () => ({ booked: true }) })
  .step('notify', {
    retriable: true,
    maxAttempts: 1,
    run: async () => {
      if (failing) throw new NonRetryableError('mail server down');
      return { sent: true };
    },
  });

/** Holds, then fails for good; undoing the hold fails for good too: the saga fails compensating. */
const refund = defineSaga({ name: 'refund', version: 1, input: z.object({}) })
  .step('hold', {
    run: async () => ({ held: true }),
    compensate: async () => {
      throw new NonRetryableError('ledger unavailable');
    },
    compensation: { maxAttempts: 1 },
  })
  .step('pay', {
    run: async () => {
      throw new NonRetryableError('account closed');
    },
  });

/** Two branches that each wait for their gate, so a cancel finds them running. */
const gates = new Map<string, () => void>();
const gated = (key: string) => new Promise<void>((resolve) => gates.set(key, resolve));
const fanout = defineSaga({ name: 'fanout', version: 1, input: z.object({}) }).parallel(
  'both',
  (branch) => ({
    a: branch({ run: () => gated('a'), compensate: () => {} }),
    b: branch({ run: () => gated('b'), compensate: () => {} }),
  }),
);

const quiet = pino({ level: 'silent' });
const token = 'a-long-random-operator-token-for-tests';
const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });
const sagas = createSagaRuntime({
  pool: db.pool,
  client,
  sagas: [booking, fanout, refund],
  logger: quiet,
});
const worker = createWorker({ pool: db.pool, jobs: sagas.jobs, logger: quiet, pollIntervalMs: 50 });
const logs = captureLogs();
const dashboard = createDashboard({
  pool: db.pool,
  token,
  sagas: [booking, fanout, refund],
  logger: logs.logger,
});
const served = await serve(dashboard);
afterAll(async () => {
  await served.close();
  await worker.stop();
  await dashboard.close();
  await sagas.close();
  await client.close();
});
const until = (id: string, status: SagaStatus) =>
  waitFor(async () => (await readSaga(db.pool, id))?.status === status, {
    what: `${id} ${status}`,
    timeoutMs: 30_000,
  });
/** An operator's POST of `action` on saga `id`, as a script would send it (with the token). */
const act = (id: string, action: 'retry' | 'cancel') =>
  operatorPost(`${served.url}/sagas/${id}/${action}`, token, '');
const retry = async (id: string) => {
  const res = await act(id, 'retry');
  expect(res.status).toBe(303);
  const location = res.headers.get('location')!;
  return (await (await fetch(`${served.url}${location}`)).text()).replace(/\s+/g, ' ');
};

describe('dashboard saga retry', () => {
  it('a refused retry says why: the lock key is held, or the saga is not failed', async () => {
    await worker.start();
    await sagas.start(booking, { id: 'first', input: { account: 'a7' } });
    await until('first', 'waiting');
    await sagas.signal('first', 'go', {});
    await until('first', 'failed');
    // A second saga of the account now holds its key, waiting for its own go.
    await sagas.start(booking, { id: 'second', input: { account: 'a7' } });
    await until('second', 'waiting');

    const busy = await retry('first');
    expect(busy).toContain('another saga of its definition holds its lock key');
    expect(busy).not.toContain('only a saga failed by a step past its pivot');
    expect((await readSaga(db.pool, 'first'))?.status).toBe('failed');

    const running = await retry('second');
    expect(running).toContain('Not retried: the saga has not failed.');

    // Once the holder ends, the retry goes through.
    await sagas.cancel('second');
    await until('second', 'cancelled');
    failing = false;
    expect(await retry('first')).toContain('Retried: the failed step runs again');
    await until('first', 'completed');
  }, 60_000);

  it("asks before running a failed compensation again as the undo it is, not as the step's run", async () => {
    // Started by the first test, unless this one runs alone.
    await worker.start().catch(() => {});
    await sagas.start(refund, { id: 'refund-failed', input: {} });
    await until('refund-failed', 'failed');
    const raw = rawHttp(served, token);
    const { cookie } = await raw.signIn();
    const page = (
      await raw.send('GET', '/sagas/refund-failed', { host: `127.0.0.1:${raw.port}`, cookie })
    ).text;
    expect(page).toContain('Retry undo hold');
    // Before: "Run hold of saga refund-failed again?", which reads as holding the funds again.
    expect(page).toContain('data-confirm="Run the undo of hold of saga refund-failed again?"');
  });

  it("a cancel the runtime refuses by throwing is shown on the saga's page with why, not a 500", async () => {
    await sagas.start(booking, { id: 'renamed', input: { account: 'b1' } });
    await until('renamed', 'waiting');
    // At a step its definition lacks (renamed without a new version): cancel() throws.
    const setStep = (step: string) =>
      db.pool.query(`UPDATE skiplock.sagas SET current_step = $1 WHERE id = 'renamed'`, [step]);
    await setStep('gone');
    const res = await act('renamed', 'cancel');
    // Before: a bare 400 'Cannot do that' page, without the saga, and the refusal not logged.
    expect(res.status).toBe(409);
    const text = (await res.text()).replace(/\s+/g, ' ');
    expect(text).toContain('data-live="saga-head"');
    expect(text).toContain('Cancel refused: saga');
    expect(text).toContain('which version 1 of saga');
    await setStep('go');
    await sagas.cancel('renamed');
    await until('renamed', 'cancelled');
  });

  it('a cancel recorded while a branch could not be cancelled says so, and is logged as done', async () => {
    await sagas.start(fanout, { id: 'fan', input: {} });
    await waitFor(() => (gates.has('a') && gates.has('b')) || null, { what: 'both branches' });
    const setStep = (step: string) =>
      db.pool.query(`UPDATE skiplock.sagas SET current_step = $1 WHERE id = 'fan/both/a'`, [step]);
    await setStep('gone');
    const res = await act('fan', 'cancel');
    expect(res.status).toBe(409);
    const text = (await res.text()).replace(/\s+/g, ' ');
    // Before: 'Cancel refused: ...', although the parent's cancel was recorded.
    expect(text).toContain('Cancel recorded, but not for every child');
    expect(text).toContain('fan/both/a');
    expect(
      logs.lines.find((l) => l.reason === 'dashboard_saga_cancel' && l.sagaId === 'fan'),
    ).toMatchObject({
      reason: 'dashboard_saga_cancel',
      accepted: true,
      childrenNotCancelled: ['fan/both/a'],
    });
    expect((await readSaga(db.pool, 'fan/both/b'))?.cancelRequested).toBe(true);
    await setStep('a');
    expect((await act('fan', 'cancel')).status).toBe(303);
    for (const key of ['a', 'b']) gates.get(key)!();
    await until('fan', 'cancelled');
  });
});
