import { createWorker } from '@skiplock/queue';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createSagaRuntime,
  defineSaga,
  sagaGraph,
  SagaDefinitionError,
  type SagaRuntime,
} from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { fast, settled, silent, startSagas, timeline } from './fixtures.js';

const db = await useTestDatabase();

/** The wake job of a sleeping saga's step, as the queue holds it. */
async function wakeJob(sagaId: string, step: string) {
  const { rows } = await db.pool.query<{ status: string; due_in_ms: number }>(
    `SELECT status, (extract(epoch FROM run_at - now()) * 1000)::float8 AS due_in_ms
     FROM skiplock.jobs WHERE idempotency_key = $1`,
    [`saga:${sagaId}:timeout:${step}`],
  );
  return rows[0];
}

const ran: string[] = [];
const undone: string[] = [];

const cooling = defineSaga({ name: 'cooling', version: 1, input: z.object({ ms: z.number() }) })
  .step('open', {
    ...fast,
    run: (ctx) => {
      ran.push(`${ctx.sagaId}:open`);
      return { at: Date.now() };
    },
    compensate: (ctx) => void undone.push(`${ctx.sagaId}:open`),
  })
  // Long enough that the test sees the saga asleep, its wake job still ahead, on a loaded machine.
  .sleep('cooldown', 2_500)
  .step('close', {
    ...fast,
    run: (ctx) => {
      ran.push(`${ctx.sagaId}:close`);
      // The sleep's output is null, typed so.
      const slept: null = ctx.steps.cooldown;
      return { after: Date.now() - ctx.steps.open.at, slept };
    },
  });

// Wakes at a moment computed from the input and an earlier output.
const scheduled = defineSaga({
  name: 'scheduled',
  version: 1,
  input: z.object({ delayMs: z.number() }),
})
  .step('plan', { ...fast, run: () => ({ base: Date.now() }) })
  .sleep('until', (ctx) => new Date(ctx.steps.plan.base + ctx.input.delayMs))
  .step('act', { ...fast, run: (ctx) => ({ late: Date.now() - ctx.steps.plan.base }) });

/** open (undone on compensation), a sleep, close: the shape the cancel and deadline tests use. */
function openSleepClose(name: string, sleep: string, ms: number, deadlineMs?: number) {
  return (
    defineSaga({
      name,
      version: 1,
      input: z.object({}),
      ...(deadlineMs ? { deadlineMs } : {}),
    })
      .step('open', {
        ...fast,
        run: () => 1,
        compensate: (ctx) => void undone.push(`${ctx.sagaId}:open`),
      })
      // Typed as one literal name so that `close` stays a new step name for the compiler.
      .sleep(sleep as 'nap', ms)
      .step('close', { ...fast, run: (ctx) => void ran.push(`${ctx.sagaId}:close`) })
  );
}

describe('durable sleep', () => {
  it('sleeps holding no worker, then goes on', async () => {
    const { runtime, worker } = await startSagas(db.pool, [cooling]);
    await runtime.start(cooling, { id: 'nap-1', input: { ms: 0 } });
    const sleeping = await settled(runtime, 'nap-1', ['waiting']);
    expect(timeline(sleeping)).toEqual(['open:completed', 'cooldown:waiting']);
    // Waited for, not read at once: the step's commit is visible before its answer frees the
    // slot. Well under the 2.5 s sleep, so a sleep that holds its slot still fails.
    await waitFor(() => worker.inFlight === 0, { what: 'the slot freed', timeoutMs: 1_500 });
    const wake = await wakeJob('nap-1', 'cooldown');
    expect(wake?.status).toBe('pending');
    expect(wake!.due_in_ms).toBeGreaterThan(100);
    const done = await settled(runtime, 'nap-1');
    expect(done.status).toBe('completed');
    expect(timeline(done)).toEqual(['open:completed', 'cooldown:completed', 'close:completed']);
    const close = done.history.find((h) => h.step === 'close')!.output as { after: number };
    expect(close.after).toBeGreaterThanOrEqual(2_500);
    expect(done.history.find((h) => h.step === 'cooldown')!.output).toBeNull();
  });

  it('wakes at the moment a function of the saga names; a moment past goes on at once', async () => {
    const { runtime } = await startSagas(db.pool, [scheduled]);
    await runtime.start(scheduled, { id: 'at-1', input: { delayMs: 500 } });
    await runtime.start(scheduled, { id: 'at-past', input: { delayMs: -60_000 } });
    const past = await settled(runtime, 'at-past');
    expect(past.status).toBe('completed');
    expect(await wakeJob('at-past', 'until')).toBeUndefined();
    const later = await settled(runtime, 'at-1');
    expect(later.status).toBe('completed');
    const act = later.history.find((h) => h.step === 'act')!.output as { late: number };
    expect(act.late).toBeGreaterThanOrEqual(500);
  });

  it('takes any Date: one past year 9999 sleeps the longest delay, one before year 1 goes on', async () => {
    // Before: the wake time went to PostgreSQL as ISO text, which it refuses past year 9999
    // ("+275760-09-13T…") or before year 1, and each attempt failed until the saga compensated.
    const { runtime } = await startSagas(db.pool, [scheduled]);
    const base = Date.now();
    await runtime.start(scheduled, { id: 'at-far', input: { delayMs: 8.6e15 - base } });
    await runtime.start(scheduled, { id: 'at-ancient', input: { delayMs: -8.6e15 - base } });
    expect((await settled(runtime, 'at-ancient')).status).toBe('completed');
    expect((await settled(runtime, 'at-far', ['waiting'])).status).toBe('waiting');
    const wake = await wakeJob('at-far', 'until');
    // The queue's longest delay, ten years.
    expect(wake!.due_in_ms).toBeGreaterThan(9 * 365 * 86_400_000);
  });

  it('a cancel during the sleep compensates; the wake job then does nothing', async () => {
    // The cancel must land before the wake: 300 ms could pass before the test saw it waiting.
    const long = openSleepClose('long-nap', 'wait-a-bit', 3_000);
    const { runtime } = await startSagas(db.pool, [long]);
    await runtime.start(long, { id: 'nap-cancel', input: {} });
    await settled(runtime, 'nap-cancel', ['waiting']);
    expect((await runtime.cancel('nap-cancel')).accepted).toBe(true);
    const done = await settled(runtime, 'nap-cancel');
    expect(done.status).toBe('cancelled');
    expect(undone).toContain('nap-cancel:open');
    // The wake job comes due and finds the saga gone on: it completes, and `close` never runs.
    await waitFor(async () => (await wakeJob('nap-cancel', 'wait-a-bit'))?.status === 'completed');
    expect(ran).not.toContain('nap-cancel:close');
    expect((await runtime.getSaga('nap-cancel'))!.status).toBe('cancelled');
  });

  it('a cancel that lands while the sleep step runs compensates at once, not at the wake time', async () => {
    const hourly = openSleepClose('hour-cancel', 'an-hour', 3_600_000);
    const holder: { runtime?: SagaRuntime } = {};
    const { runtime } = await startSagas(db.pool, [hourly], {
      // The cancel commits while the sleep step's job is running: it can only flag the saga.
      faults: async (point) => {
        if (point.step === 'an-hour' && point.phase === 'before') {
          expect(await holder.runtime!.cancel(point.sagaId)).toMatchObject({ accepted: true });
        }
      },
    });
    holder.runtime = runtime;
    await runtime.start(hourly, { id: 'nap-cancel-running', input: {} });
    const done = await settled(runtime, 'nap-cancel-running');
    expect(done.status).toBe('cancelled');
    expect(undone).toContain('nap-cancel-running:open');
    expect(await wakeJob('nap-cancel-running', 'an-hour')).toBeUndefined();
  });

  it('the deadline during a sleep compensates at the deadline, not at the wake time', async () => {
    // `open` and the sleep's start must fit in the deadline for the sleep to be what it cuts.
    const hour = openSleepClose('hour-nap', 'an-hour', 3_600_000, 3_000);
    const { runtime } = await startSagas(db.pool, [hour]);
    const began = Date.now();
    await runtime.start(hour, { id: 'nap-deadline', input: {} });
    const done = await settled(runtime, 'nap-deadline');
    expect(done.status).toBe('compensated');
    expect(Date.now() - began).toBeLessThan(15_000);
    expect(done.error).toContain('deadline exceeded while sleeping');
    expect(undone).toContain('nap-deadline:open');
  });

  it('survives a restart: a new runtime and worker wake the saga a stopped one put to sleep', async () => {
    const first = createSagaRuntime({ pool: db.pool, sagas: [cooling], logger: silent });
    const firstWorker = createWorker({
      pool: db.pool,
      jobs: first.jobs,
      logger: silent,
      pollIntervalMs: 20,
      sweeper: false,
      retention: false,
    });
    await firstWorker.start();
    await first.start(cooling, { id: 'nap-restart', input: { ms: 0 } });
    await settled(first, 'nap-restart', ['waiting']);
    await firstWorker.stop();
    await first.close();
    // Nothing runs the saga now; a new process (here: a new runtime and worker) takes over.
    const { runtime } = await startSagas(db.pool, [cooling]);
    const done = await settled(runtime, 'nap-restart');
    expect(done.status).toBe('completed');
    expect(ran.filter((r) => r === 'nap-restart:close')).toHaveLength(1);
  });

  it('a sleep may follow the pivot; there it only delays', async () => {
    // The start and `charge` must fit in the deadline (100 ms left no room on a loaded machine);
    // a sleep longer than the deadline still has the deadline pass during the sleep.
    const paid = defineSaga({
      name: 'paid-nap',
      version: 1,
      input: z.object({}),
      deadlineMs: 2_000,
    })
      .step('charge', { ...fast, pivot: true, run: () => ({ at: Date.now() }) })
      .sleep('settle-period', 2_500)
      .step('receipt', {
        ...fast,
        retriable: true,
        run: (ctx) => Date.now() - ctx.steps.charge.at,
      });
    expect(paid.steps.map((s) => s.role)).toEqual(['pivot', 'retriable', 'retriable']);
    const { runtime } = await startSagas(db.pool, [paid]);
    await runtime.start(paid, { id: 'nap-paid', input: {} });
    // Past its deadline while it sleeps, yet a saga past its pivot only goes forward.
    const done = await settled(runtime, 'nap-paid');
    expect(done.status).toBe('completed');
    expect(timeline(done)).toEqual([
      'charge:completed',
      'settle-period:completed',
      'receipt:completed',
    ]);
    // The whole sleep, though the deadline passed during it.
    expect(done.history.find((h) => h.step === 'receipt')!.output).toBeGreaterThanOrEqual(2_500);
  });

  it('a wake-time function that returns no Date fails the step for good, which compensates', async () => {
    const broken = defineSaga({ name: 'broken-nap', version: 1, input: z.object({}) })
      .step('open', { ...fast, run: () => 1, compensate: () => {} })
      .sleep('oops', () => 'tomorrow' as unknown as Date);
    const { runtime } = await startSagas(db.pool, [broken]);
    await runtime.start(broken, { id: 'nap-broken', input: {} });
    const done = await settled(runtime, 'nap-broken');
    expect(done.status).toBe('compensated');
    expect(done.error).toContain('its function returned string, not the Date to wake');
  });

  it('refuses a duration that is not whole milliseconds or a function, naming the step', () => {
    const base = defineSaga({ name: 'bad-nap', version: 1, input: z.object({}) });
    for (const bad of [-1, 1.5, Number.NaN, 11 * 365 * 86_400_000, 'soon']) {
      expect(() => base.sleep('nap', bad as number)).toThrow(SagaDefinitionError);
    }
    expect(() => base.sleep('nap', -1)).toThrow(/sleep step "nap": the duration must be/);
  });

  it('is drawn as a sleep in the graph', () => {
    const graph = sagaGraph(cooling);
    expect(graph).toContain('s1[/"cooldown: sleep 2500 ms"/]');
    expect(sagaGraph(scheduled)).toContain('"until: sleep until a computed time"');
  });
});
