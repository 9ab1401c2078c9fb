import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createSagaRuntime, defineSaga } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { captureLogs, fast, settled, silent, startSagas, timeline } from './fixtures.js';

// The reconciler and sagas whose version (or step) its runtime does not define; recovery.test.ts
// has the 'fail' side of it, as it was before `unknownVersions`.
const db = await useTestDatabase();

const input = z.object({});

/** Until the job under `key` (a saga's step or timeout job) is dead. */
const untilDead = (key: string) =>
  waitFor(
    async () =>
      (
        await db.pool.query(
          `SELECT 1 FROM skiplock.jobs WHERE idempotency_key = $1 AND status = 'dead'`,
          [key],
        )
      ).rowCount === 1,
    { what: `job ${key} dead` },
  );

describe("a reconciler that leaves sagas of a version it does not define (unknownVersions: 'leave', the default)", () => {
  // Each saga here runs in a queue of its own: a test's worker would kill the jobs of another
  // test's sagas (types it does not know) in a shared one, stranding them.

  /** One log line a pass at most, whatever the count. */
  const leftLines = (lines: Record<string, unknown>[]) =>
    lines.filter((l) => l.reason === 'saga_reconcile_unknown_version_left');

  it('leaves a stranded saga of a dropped version running, and a runtime that has it compensates it', async () => {
    const undone: string[] = [];
    const v1 = defineSaga({ name: 'rolling', version: 1, input, queue: 'rolling' })
      .step('a', { ...fast, run: () => 1, compensate: (ctx) => void undone.push(ctx.sagaId) })
      .waitFor('go', { payload: z.object({}) })
      .step('b', { ...fast, run: () => 2 });
    const v2 = defineSaga({ name: 'rolling', version: 2, input, queue: 'rolling' }).step('a', {
      ...fast,
      run: () => 1,
    });
    // A host of the old deploy runs step a, then goes.
    const { runtime: old, worker: oldWorker } = await startSagas(db.pool, [v1]);
    await old.start(v1, { id: 'roll', input: {} });
    await settled(old, 'roll', ['waiting']);
    await oldWorker.stop();
    // A host of the new deploy (version 1 dropped) kills step b's job as an unknown type.
    const { logger, lines } = captureLogs();
    const { runtime: newer, worker } = await startSagas(db.pool, [v2], { logger });
    await old.signal('roll', 'go', {});
    await untilDead('saga:roll:b');
    await waitFor(() => worker.inFlight === 0 || null, { what: 'the worker to let go of the job' });
    // Before: failed here, with step a never compensated.
    expect(await newer.reconciler.runOnce()).toEqual({
      ran: true,
      reconciled: 0,
      sagaIds: [],
      more: false,
      left: ['roll'],
    });
    expect(await newer.getSaga('roll')).toMatchObject({
      status: 'running',
      currentStep: 'b',
      stranded: { status: 'dead' },
    });
    expect((await newer.reconciler.runOnce()).left).toEqual(['roll']);
    // One line a pass, with the count, and nothing said of it moving on.
    expect(leftLines(lines)).toEqual([
      expect.objectContaining({ level: 40, count: 1, sagaIds: ['roll'], unknownVersions: 'leave' }),
      expect.objectContaining({ count: 1 }),
    ]);
    expect(lines.filter((l) => l.reason === 'saga_reconciled')).toEqual([]);
    expect(undone).toEqual([]);
    // The new host's worker stops first: workers claim by queue, and it would kill the
    // compensation's job as of an unknown type too.
    await worker.stop();
    const { runtime: knows } = await startSagas(db.pool, [v1, v2]);
    expect(await knows.reconciler.runOnce()).toMatchObject({ sagaIds: ['roll'], left: [] });
    const done = await settled(knows, 'roll');
    expect(done.status).toBe('compensated');
    expect(timeline(done)).toEqual(['a:completed', 'go:completed', 'b:failed', 'undo a:completed']);
    expect(done.history.find((h) => h.step === 'b')?.error).toMatch(
      /^job \d+ is dead: unknown_type/,
    );
    expect(undone).toEqual(['roll']);
    expect((await newer.reconciler.runOnce()).left).toEqual([]);
  });

  it('leaves a waiting saga of a dropped version whose wake job died, and a runtime that has it compensates it', async () => {
    const undone: string[] = [];
    const v1 = defineSaga({ name: 'napping', version: 1, input, queue: 'napping' })
      .step('a', { ...fast, run: () => 1, compensate: (ctx) => void undone.push(ctx.sagaId) })
      .sleep('nap', 300)
      .step('b', { ...fast, run: () => 2 });
    const v2 = defineSaga({ name: 'napping', version: 2, input, queue: 'napping' }).step('a', {
      ...fast,
      run: () => 1,
    });
    const { runtime: old, worker: oldWorker } = await startSagas(db.pool, [v1]);
    await old.start(v1, { id: 'napper', input: {} });
    await settled(old, 'napper', ['waiting']);
    await oldWorker.stop();
    const { logger, lines } = captureLogs();
    const { runtime: newer, worker } = await startSagas(db.pool, [v2], { logger });
    await untilDead('saga:napper:timeout:nap');
    await waitFor(() => worker.inFlight === 0 || null, { what: 'the worker to let go of the job' });
    // Before: failed here, with step a never compensated.
    expect(await newer.reconciler.runOnce()).toMatchObject({ sagaIds: [], left: ['napper'] });
    expect(await newer.getSaga('napper')).toMatchObject({ status: 'waiting', currentStep: 'nap' });
    expect(leftLines(lines)).toEqual([expect.objectContaining({ count: 1, sagaIds: ['napper'] })]);
    await worker.stop();
    const { runtime: knows } = await startSagas(db.pool, [v1]);
    expect(await knows.reconciler.runOnce()).toMatchObject({ sagaIds: ['napper'], left: [] });
    const done = await settled(knows, 'napper');
    expect(done.status).toBe('compensated');
    expect(timeline(done)).toEqual(['a:completed', 'nap:failed', 'undo a:completed']);
    expect(undone).toEqual(['napper']);
  });

  it('goes on past a page of sagas it leaves, says more while a page was full, and logs a count a pass', async () => {
    const lost = defineSaga({ name: 'lost', version: 1, input, queue: 'lost' }).step('a', {
      ...fast,
      run: () => 1,
    });
    const kept = defineSaga({ name: 'kept', version: 1, input, queue: 'kept' }).step('a', {
      ...fast,
      run: () => 1,
    });
    // No worker runs: each saga stays on its first job, which is then cancelled by hand.
    const starter = createSagaRuntime({ pool: db.pool, sagas: [lost, kept], logger: silent });
    for (const id of ['lost-1', 'lost-2']) await starter.start(lost, { id, input: {} });
    await starter.start(kept, { id: 'kept-1', input: {} });
    for (const id of ['lost-1', 'lost-2', 'kept-1']) {
      const jobId = (await starter.getSaga(id))!.currentJobId;
      await db.pool.query(`UPDATE skiplock.jobs SET status = 'cancelled' WHERE id = $1`, [jobId]);
    }
    await starter.close();
    const { logger, lines } = captureLogs();
    const runtime = createSagaRuntime({
      pool: db.pool,
      sagas: [kept],
      logger,
      reconciler: { batchSize: 2 },
    });
    // The left sagas are the least recently moved: they fill the first page, and the next pass
    // goes on after them.
    expect(await runtime.reconciler.runOnce()).toMatchObject({
      reconciled: 0,
      more: true,
      left: ['lost-1', 'lost-2'],
    });
    expect(await runtime.reconciler.runOnce()).toMatchObject({
      sagaIds: ['kept-1'],
      more: false,
      left: [],
    });
    expect((await runtime.getSaga('kept-1'))?.status).toBe('compensated');
    // A new round reads them again: one line a pass, not one a saga.
    expect(await runtime.reconciler.runOnce()).toMatchObject({
      more: true,
      left: ['lost-1', 'lost-2'],
    });
    expect(leftLines(lines).map((l) => l.count)).toEqual([2, 2]);
    expect((await runtime.getSaga('lost-1'))?.status).toBe('running');
    await runtime.close();
    // Retired for good: a runtime told to fail them ends them.
    const failing = createSagaRuntime({
      pool: db.pool,
      sagas: [kept],
      logger: silent,
      reconciler: { unknownVersions: 'fail' },
    });
    expect((await failing.reconciler.runOnce()).sagaIds.sort()).toEqual(['lost-1', 'lost-2']);
    expect((await failing.getSaga('lost-1'))?.error).toMatch(
      /; no runtime here knows saga "lost" version 1$/,
    );
    await failing.close();
  });

  it('refuses an unknownVersions that is not leave or fail, naming it', () => {
    for (const [bad, named] of [
      ['drop', '"drop"'],
      ['Leave', '"Leave"'],
      [1, '1'],
    ] as const) {
      expect(() =>
        createSagaRuntime({
          pool: db.pool,
          sagas: [defineSaga({ name: 'any', version: 1, input }).step('a', { run: () => 1 })],
          logger: silent,
          reconciler: { unknownVersions: bad as never },
        }),
      ).toThrow(`reconciler unknownVersions must be 'leave' or 'fail', got ${named}`);
    }
  });
});
