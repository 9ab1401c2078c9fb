import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createWorker } from '@skiplock/queue';
import {
  ChildSagasError,
  createSagaRuntime,
  defineSaga,
  SagaDefinitionError,
  SagaValidationError,
} from '../src/index.js';
import { checkSagaCrashes } from '../src/testing.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { fast, settled, silent, startSagas, timeline } from './fixtures.js';

const db = await useTestDatabase();

/** What every step, branch and compensation did, as `<sagaId>:<what>`. */
const effects: string[] = [];
const mine = (id: string) => effects.filter((e) => e.startsWith(`${id}:`));
/** The compensations that ran for saga `id` (its branches' included), sorted. */
const undone = (id: string) =>
  mine(id)
    .filter((e) => e.includes(':un'))
    .sort();
/** Branches that wait at their gate (`<sagaId>:<branch>`), so a test can act while they run. */
const gates = new Map<string, () => void>();
const open = async (key: string) => {
  await waitFor(() => gates.has(key) || null, { what: `${key} to wait at its gate` });
  gates.get(key)!();
  gates.delete(key);
};
const gate = (key: string) => new Promise<void>((resolve) => gates.set(key, resolve));

const input = z.object({
  id: z.string(),
  /** Branch or step that fails for good. */
  fail: z.string().optional(),
  /** Branches that wait at their gate. */
  hold: z.array(z.string()).optional(),
  /** Branches (comma-separated) whose compensation fails while `undoBroken` is set. */
  brokenUndo: z.string().optional(),
});
let undoBroken = true;
const breaks = (value: { brokenUndo?: string | undefined }, branch: string) =>
  undoBroken && (value.brokenUndo?.split(',').includes(branch) ?? false);

const held = async (ctx: { sagaId: string; step: string; input: z.output<typeof input> }) => {
  if (ctx.input.hold?.includes(ctx.step)) await gate(`${ctx.sagaId}:${ctx.step}`);
  if (ctx.input.fail === ctx.step) throw new Error(`${ctx.step} refused`);
};

const checkout = defineSaga({ name: 'checkout', version: 1, input })
  .step('quote', {
    ...fast,
    run: (ctx) => {
      effects.push(`${ctx.sagaId}:quote`);
      return { total: 42 };
    },
    compensate: (ctx) => void effects.push(`${ctx.sagaId}:unquote`),
  })
  .parallel('prepare', (branch) => ({
    stock: branch({
      ...fast,
      maxAttempts: 1,
      run: async (ctx) => {
        await held(ctx);
        effects.push(`${ctx.sagaId}:stock`);
        return { reservation: `R-${ctx.input.id}` };
      },
      compensation: { ...fast, maxAttempts: 1 },
      compensate: (ctx, output) => {
        if (breaks(ctx.input, 'stock')) throw new Error('stock service down');
        effects.push(`${ctx.sagaId}:unstock ${output.reservation}`);
      },
    }),
    card: branch({
      ...fast,
      maxAttempts: 1,
      run: async (ctx) => {
        await held(ctx);
        // The outputs before the group, typed.
        effects.push(`${ctx.sagaId}:card ${ctx.steps.quote.total}`);
        return { auth: ctx.steps.quote.total * 100 };
      },
      compensation: { ...fast, maxAttempts: 1 },
      compensate: (ctx) => {
        if (breaks(ctx.input, 'card')) throw new Error('gateway down');
        effects.push(`${ctx.sagaId}:uncard`);
      },
    }),
    fraud: branch({
      ...fast,
      maxAttempts: 1,
      // No compensate: a check has nothing to undo, so it is never reopened.
      run: async (ctx) => {
        await held(ctx);
        effects.push(`${ctx.sagaId}:fraud`);
        return 'ok' as const;
      },
    }),
  }))
  .step('confirm', {
    ...fast,
    maxAttempts: 1,
    run: (ctx) => {
      if (ctx.input.fail === 'confirm') throw new Error('confirm refused');
      const { stock, card, fraud } = ctx.steps.prepare;
      effects.push(`${ctx.sagaId}:confirm ${stock.reservation} ${card.auth} ${fraud}`);
      return null;
    },
  });

const branchIds = (id: string) => ['card', 'fraud', 'stock'].map((b) => `${id}/prepare/${b}`);

/** A checkout whose `confirm` fails and whose branches in `brokenUndo` cannot be undone: failed. */
async function failedOnUndo(id: string, brokenUndo: string) {
  undoBroken = true;
  const { runtime } = await startSagas(db.pool, [checkout]);
  await runtime.start(checkout, { id, input: { id, fail: 'confirm', brokenUndo } });
  expect((await settled(runtime, id)).status).toBe('failed');
  return runtime;
}

describe('parallel branches', () => {
  it('runs the branches at the same time and completes the group with their outputs by name', async () => {
    const { runtime } = await startSagas(db.pool, [checkout]);
    const hold = ['stock', 'card', 'fraud'];
    await runtime.start(checkout, { id: 'p1', input: { id: 'p1', hold } });
    // All three wait at their gates at once: they run side by side, on separate jobs.
    await waitFor(() => hold.every((b) => gates.has(`p1:${b}`)) || null, {
      what: 'every branch to run',
    });
    expect((await runtime.getSaga('p1'))?.status).toBe('waiting');
    for (const b of hold) await open(`p1:${b}`);
    const saga = await settled(runtime, 'p1');
    expect(saga.status).toBe('completed');
    expect(saga.history.find((h) => h.step === 'prepare')?.output).toEqual({
      stock: { reservation: 'R-p1' },
      card: { auth: 4200 },
      fraud: 'ok',
    });
    expect(timeline(saga)).toEqual(['quote:completed', 'prepare:completed', 'confirm:completed']);
    expect(saga.children.map((c) => [c.id, c.name, c.step, c.status])).toEqual(
      branchIds('p1').map((id) => [
        id,
        `checkout.prepare.${id.split('/')[2]}`,
        'prepare',
        'completed',
      ]),
    );
    expect(mine('p1').slice(-1)).toEqual(['p1:confirm R-p1 4200 ok']);
    expect(new Set(mine('p1'))).toEqual(
      new Set(['p1:quote', 'p1:stock', 'p1:card 42', 'p1:fraud', 'p1:confirm R-p1 4200 ok']),
    );
  });

  it('a failing branch lets the others finish, then undoes the completed ones and what came before', async () => {
    const { runtime } = await startSagas(db.pool, [checkout]);
    await runtime.start(checkout, { id: 'p2', input: { id: 'p2', fail: 'card', hold: ['stock'] } });
    await waitFor(
      async () => (await runtime.getSaga('p2/prepare/card'))?.status === 'compensated' || null,
      { what: 'the card branch to fail' },
    );
    // The stock branch still runs: the saga waits for it rather than cutting it off.
    expect((await runtime.getSaga('p2'))?.status).toBe('waiting');
    expect(mine('p2')).not.toContain('p2:unquote');
    await open('p2:stock');
    const saga = await settled(runtime, 'p2');
    expect(saga.status).toBe('compensated');
    expect(saga.error).toMatch(
      /step "prepare" failed: branch saga "p2\/prepare\/card" ended compensated/,
    );
    expect(timeline(saga)).toEqual([
      'quote:completed',
      'prepare:failed',
      'undo prepare:completed',
      'undo quote:completed',
    ]);
    const statuses = await Promise.all(branchIds('p2').map((id) => runtime.getSaga(id)));
    // card failed (nothing to undo in a one-step saga), fraud had nothing to undo.
    expect(statuses.map((s) => s?.status)).toEqual(['compensated', 'completed', 'compensated']);
    const done = mine('p2');
    expect(done.indexOf('p2:unstock R-p2')).toBeLessThan(done.indexOf('p2:unquote'));
    expect(done.filter((e) => e.startsWith('p2:un'))).toEqual(['p2:unstock R-p2', 'p2:unquote']);
  });

  it.each(['stock', 'card', 'fraud'])(
    'a failure inside branch %s undoes the other completed branches, then the step before',
    async (failing) => {
      const id = `pf-${failing}`;
      const { runtime } = await startSagas(db.pool, [checkout]);
      await runtime.start(checkout, { id, input: { id, fail: failing } });
      const saga = await settled(runtime, id);
      expect(saga.status).toBe('compensated');
      expect(saga.error).toContain(`branch saga "${id}/prepare/${failing}" ended compensated`);
      expect(timeline(saga)).toEqual([
        'quote:completed',
        'prepare:failed',
        'undo prepare:completed',
        'undo quote:completed',
      ]);
      // Every other branch ran (none is cut off) and each with a compensation was undone.
      const undone = { stock: `${id}:unstock R-${id}`, card: `${id}:uncard` } as const;
      const expected = Object.entries(undone)
        .filter(([branch]) => branch !== failing)
        .map(([, effect]) => effect);
      const done = mine(id);
      expect(done.filter((e) => e.includes(':un')).sort()).toEqual(
        [...expected, `${id}:unquote`].sort(),
      );
      expect(done.at(-1)).toBe(`${id}:unquote`);
      const ran = ['stock', 'card', 'fraud'].filter((b) => b !== failing);
      for (const b of ran) expect(done.some((e) => e.startsWith(`${id}:${b}`))).toBe(true);
      expect(done.some((e) => e.startsWith(`${id}:${failing}`))).toBe(false);
    },
  );

  it('a failure after the group undoes every branch with a compensation, then the steps before', async () => {
    const { runtime } = await startSagas(db.pool, [checkout]);
    await runtime.start(checkout, { id: 'p3', input: { id: 'p3', fail: 'confirm' } });
    const saga = await settled(runtime, 'p3');
    expect(saga.status).toBe('compensated');
    expect(timeline(saga)).toEqual([
      'quote:completed',
      'prepare:completed',
      'confirm:failed',
      'undo prepare:completed',
      'undo quote:completed',
    ]);
    const done = mine('p3');
    const last = done.indexOf('p3:unquote');
    expect(done.indexOf('p3:unstock R-p3')).toBeLessThan(last);
    expect(done.indexOf('p3:uncard')).toBeLessThan(last);
    expect(last).toBe(done.length - 1);
    const statuses = await Promise.all(branchIds('p3').map((id) => runtime.getSaga(id)));
    expect(statuses.map((s) => s?.status)).toEqual(['compensated', 'completed', 'compensated']);
  });

  it('cancelling the saga cancels every running branch; everything done is undone', async () => {
    const { runtime } = await startSagas(db.pool, [checkout]);
    const hold = ['stock', 'card'];
    await runtime.start(checkout, { id: 'p4', input: { id: 'p4', hold } });
    await waitFor(() => hold.every((b) => gates.has(`p4:${b}`)) || null, {
      what: 'both branches to run',
    });
    await waitFor(
      async () => (await runtime.getSaga('p4/prepare/fraud'))?.status === 'completed' || null,
      { what: 'the fraud branch to complete' },
    );
    expect(await runtime.cancel('p4')).toEqual({ accepted: true, status: 'waiting' });
    for (const b of hold) await open(`p4:${b}`);
    const saga = await settled(runtime, 'p4');
    expect(saga.status).toBe('cancelled');
    expect(timeline(saga)).toEqual([
      'quote:completed',
      'prepare:cancelled',
      'undo quote:completed',
    ]);
    const statuses = await Promise.all(branchIds('p4').map((id) => runtime.getSaga(id)));
    expect(statuses.map((s) => s?.status)).toEqual(['cancelled', 'completed', 'cancelled']);
    expect(undone('p4')).toEqual(['p4:uncard', 'p4:unquote', 'p4:unstock R-p4']);
  });

  it('a branch whose cancel throws does not keep the others from being cancelled; cancel again retries it', async () => {
    const { runtime } = await startSagas(db.pool, [checkout]);
    const hold = ['stock', 'card'];
    await runtime.start(checkout, { id: 'p9', input: { id: 'p9', hold } });
    await waitFor(() => hold.every((b) => gates.has(`p9:${b}`)) || null, {
      what: 'both branches to run',
    });
    // The first branch cancelled is at a step its definition lacks, so its cancel throws.
    const setStep = (step: string) =>
      db.pool.query(`UPDATE skiplock.sagas SET current_step = $1 WHERE id = 'p9/prepare/stock'`, [
        step,
      ]);
    await setStep('renamed');
    const refused = await runtime.cancel('p9').catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(ChildSagasError);
    expect(refused).toMatchObject({
      code: 'children_not_cancelled',
      result: { accepted: true, status: 'waiting' },
      children: [{ sagaId: 'p9/prepare/stock' }],
    });
    expect((refused as Error).message).toContain('"p9/prepare/stock" (');
    expect((refused as Error).message).toContain('step "renamed"');
    expect((refused as Error).message).not.toContain('p9/prepare/card');
    // The branch after it was cancelled all the same (before: still running, unflagged).
    expect((await runtime.getSaga('p9/prepare/card'))?.cancelRequested).toBe(true);
    expect((await runtime.getSaga('p9'))?.cancelRequested).toBe(true);
    await setStep('stock');
    expect(await runtime.cancel('p9')).toEqual({ accepted: true, status: 'waiting' });
    expect((await runtime.getSaga('p9/prepare/stock'))?.cancelRequested).toBe(true);
    for (const b of hold) await open(`p9:${b}`);
    const saga = await settled(runtime, 'p9');
    expect(saga.status).toBe('cancelled');
    expect(undone('p9')).toEqual(['p9:uncard', 'p9:unquote', 'p9:unstock R-p9']);
  });

  it("a branch that cannot be undone fails the saga; the operator's retry of the saga retries that branch", async () => {
    undoBroken = true;
    const { runtime } = await startSagas(db.pool, [checkout]);
    await runtime.start(checkout, {
      id: 'p5',
      input: { id: 'p5', fail: 'confirm', brokenUndo: 'card' },
    });
    const failed = await settled(runtime, 'p5');
    expect(failed.status).toBe('failed');
    expect(failed.error).toMatch(
      /compensation of "prepare" failed: branch saga "p5\/prepare\/card" is failed and cannot be undone/,
    );
    expect((await runtime.getSaga('p5/prepare/card'))?.status).toBe('failed');
    // The stock branch was undone; what came before the group waits for the operator.
    expect(mine('p5')).not.toContain('p5:unquote');
    undoBroken = false;
    expect(await runtime.retryFailed('p5')).toMatchObject({
      retried: true,
      step: 'prepare',
      kind: 'compensation',
    });
    const saga = await settled(runtime, 'p5', ['compensated']);
    expect(timeline(saga).slice(-2)).toEqual(['undo prepare:completed', 'undo quote:completed']);
    expect(undone('p5')).toEqual(['p5:uncard', 'p5:unquote', 'p5:unstock R-p5']);
  });

  it('one retryFailed retries every branch that could not be undone', async () => {
    const runtime = await failedOnUndo('p6', 'card,stock');
    const branches = await Promise.all(branchIds('p6').map((id) => runtime.getSaga(id)));
    expect(branches.map((b) => b?.status)).toEqual(['failed', 'completed', 'failed']);
    undoBroken = false;
    expect(await runtime.retryFailed('p6')).toMatchObject({ retried: true, step: 'prepare' });
    const saga = await settled(runtime, 'p6', ['compensated']);
    expect(timeline(saga).slice(-2)).toEqual(['undo prepare:completed', 'undo quote:completed']);
    expect(undone('p6')).toEqual(['p6:uncard', 'p6:unquote', 'p6:unstock R-p6']);
  });

  it('a branch whose retry throws does not keep the others from being retried; retry again retries it', async () => {
    const runtime = await failedOnUndo('p10', 'card,stock');
    undoBroken = false;
    // The first failed branch retried (card) is of a version no runtime knows: its retry throws.
    const setVersion = (version: number) =>
      db.pool.query(`UPDATE skiplock.sagas SET version = $1 WHERE id = 'p10/prepare/card'`, [
        version,
      ]);
    await setVersion(99);
    const threw = await runtime.retryFailed('p10').catch((error: unknown) => error);
    expect(threw).toBeInstanceOf(ChildSagasError);
    expect(threw).toMatchObject({
      code: 'children_not_retried',
      result: { retried: false, step: 'prepare', kind: 'compensation' },
      children: [{ sagaId: 'p10/prepare/card' }],
    });
    expect((threw as Error).message).toContain(
      '"p10/prepare/card" (saga "checkout.prepare.card" version 99',
    );
    // The branch after it was retried all the same (before: left failed).
    expect((await settled(runtime, 'p10/prepare/stock', ['compensated'])).status).toBe(
      'compensated',
    );
    expect((await runtime.getSaga('p10'))?.status).toBe('failed');
    await setVersion(1);
    expect(await runtime.retryFailed('p10')).toMatchObject({ retried: true, step: 'prepare' });
    const saga = await settled(runtime, 'p10', ['compensated']);
    expect(saga.status).toBe('compensated');
    expect(undone('p10')).toEqual(['p10:uncard', 'p10:unquote', 'p10:unstock R-p10']);
  });

  it('retryFailed is retried only when every failed branch runs again, and names the refusal', async () => {
    const runtime = await failedOnUndo('p8', 'card,stock');
    // Retention removed the card branch's dead compensation job.
    const card = await runtime.getSaga('p8/prepare/card');
    const dead = card?.history.find((h) => h.kind === 'compensation' && h.status === 'failed');
    await db.pool.query('DELETE FROM skiplock.jobs WHERE id = $1', [dead?.jobId]);
    undoBroken = false;
    expect(await runtime.retryFailed('p8')).toMatchObject({
      retried: false,
      step: 'prepare',
      reason: 'job_gone',
    });
    // The stock branch was retried and undone; the saga stays failed on the card branch.
    await waitFor(() => mine('p8').includes('p8:unstock R-p8') || null, {
      what: 'the stock branch to be undone',
    });
    expect((await runtime.getSaga('p8'))?.status).toBe('failed');
    expect(mine('p8')).not.toContain('p8:unquote');
  });

  it('a cancelled branch whose own undo fails does not keep its completed siblings from being undone', async () => {
    undoBroken = true;
    const { runtime } = await startSagas(db.pool, [checkout]);
    await runtime.start(checkout, {
      id: 'p7',
      input: { id: 'p7', hold: ['card'], brokenUndo: 'card' },
    });
    await waitFor(() => gates.has('p7:card') || null, { what: 'the card branch to run' });
    await waitFor(
      async () => (await runtime.getSaga('p7/prepare/stock'))?.status === 'completed' || null,
      { what: 'the stock branch to complete' },
    );
    expect(await runtime.cancel('p7')).toEqual({ accepted: true, status: 'waiting' });
    // The card branch finishes its step, then undoes it (the cancel), and that undo fails.
    await open('p7:card');
    const failed = await settled(runtime, 'p7');
    expect(failed.status).toBe('failed');
    expect(failed.error).toMatch(/branch saga "p7\/prepare\/card" is failed and cannot be undone/);
    // The stock reservation was undone all the same; what came before waits for the operator.
    expect(mine('p7')).toContain('p7:unstock R-p7');
    expect(mine('p7')).not.toContain('p7:unquote');
    undoBroken = false;
    expect(await runtime.retryFailed('p7')).toMatchObject({ retried: true });
    const saga = await settled(runtime, 'p7', ['compensated', 'cancelled']);
    expect(undone('p7')).toEqual(['p7:uncard', 'p7:unquote', 'p7:unstock R-p7']);
    expect(timeline(saga).at(-1)).toBe('undo quote:completed');
  });

  it('hands a worker only the branches it can start at once; the rest go to other workers', async () => {
    const spread = defineSaga({ name: 'spread', version: 1, input: z.object({}) }).parallel(
      'fan',
      (branch) => ({
        a: branch({ ...fast, run: (ctx) => gate(`${ctx.sagaId}:a`).then(() => 1) }),
        b: branch({ ...fast, run: (ctx) => gate(`${ctx.sagaId}:b`).then(() => 2) }),
        c: branch({ ...fast, run: (ctx) => gate(`${ctx.sagaId}:c`).then(() => 3) }),
      }),
    );
    const worker = (runtime: { jobs: typeof single.jobs }, concurrency: number) =>
      createWorker({
        pool: db.pool,
        jobs: runtime.jobs,
        logger: silent,
        concurrency,
        // No claims ahead: this is about hand-offs, not the prefetch buffer.
        maxPrefetch: 0,
        pollIntervalMs: 20,
        sweeper: false,
        retention: false,
      });
    // One slot: the group's job runs here and frees it for one branch.
    const single = createSagaRuntime({ pool: db.pool, sagas: [spread], logger: silent });
    const narrow = worker(single, 1);
    await narrow.start();
    const other = createSagaRuntime({ pool: db.pool, sagas: [spread], logger: silent });
    const wide = worker(other, 4);
    try {
      await single.start(spread, { id: 'sp1', input: {} });
      await waitFor(() => gates.has('sp1:a') || gates.has('sp1:b') || gates.has('sp1:c') || null, {
        what: 'a branch to run on the one-slot worker',
      });
      // Only now a second worker: it can take the two branches the first had no room for
      // (handed to the first, they would wait in its buffer, leased to it, while this one idles).
      await wide.start();
      const all = ['a', 'b', 'c'].map((b) => `sp1:${b}`);
      await waitFor(() => all.every((k) => gates.has(k)) || null, {
        what: 'all three branches to run at once',
      });
      for (const k of all) await open(k);
      const saga = await settled(single, 'sp1');
      expect(saga.status).toBe('completed');
      expect(saga.history.find((h) => h.step === 'fan')?.output).toEqual({ a: 1, b: 2, c: 3 });
    } finally {
      await Promise.all([narrow.stop({ timeoutMs: 1_000 }), wide.stop({ timeoutMs: 1_000 })]);
      await Promise.all([single.close(), other.close()]);
    }
  });

  it('a saga with a lock key goes on undoing its group only while no other saga holds the key', async () => {
    const keyed = defineSaga({
      name: 'keyed-group',
      version: 1,
      input: z.object({ account: z.string(), fail: z.boolean(), holdUndo: z.boolean() }),
      lockKey: (input) => input.account,
      whenLocked: 'refuse',
    })
      .parallel('prepare', (branch) => ({
        hold: branch({
          ...fast,
          run: () => 'held',
          compensation: { ...fast, maxAttempts: 1 },
          compensate: async (ctx) => {
            if (undoBroken) throw new Error('ledger down');
            if (ctx.input.holdUndo) await gate(`${ctx.sagaId}:unhold`);
            effects.push(`${ctx.sagaId}:unhold`);
          },
        }),
        note: branch({ ...fast, run: () => 'noted' }),
      }))
      .step('settle', {
        ...fast,
        maxAttempts: 1,
        run: async (ctx) => {
          if (ctx.input.fail) throw new Error('settlement refused');
          await gate(`${ctx.sagaId}:settle`);
          return null;
        },
      });
    const { runtime } = await startSagas(db.pool, [keyed]);
    const fail = async (id: string, holdUndo: boolean) => {
      undoBroken = true;
      await runtime.start(keyed, { id, input: { account: 'acct-1', fail: true, holdUndo } });
      expect((await settled(runtime, id)).status).toBe('failed');
      undoBroken = false;
    };
    // A failed saga let go of its key: another takes it and holds it (waiting at its gate).
    const holder = async (id: string) => {
      await runtime.start(keyed, {
        id,
        input: { account: 'acct-1', fail: false, holdUndo: false },
      });
      await waitFor(() => gates.has(`${id}:settle`) || null, { what: `${id} to hold the key` });
    };

    // The operator's retry is refused while the key is held, and goes on once it is free.
    await fail('k1', false);
    await holder('k2');
    expect(await runtime.retryFailed('k1')).toMatchObject({ retried: false, reason: 'lock_busy' });
    await open('k2:settle');
    expect((await settled(runtime, 'k2')).status).toBe('completed');
    expect(await runtime.retryFailed('k1')).toMatchObject({ retried: true, step: 'prepare' });
    expect((await settled(runtime, 'k1', ['compensated'])).status).toBe('compensated');

    // The key is taken while the retried branch is being undone: the branch ends undone, the
    // saga stays failed (no second active saga of the key), and a later retry goes on from there.
    await fail('k3', true);
    expect(await runtime.retryFailed('k3')).toMatchObject({ retried: true });
    await waitFor(() => gates.has('k3:unhold') || null, { what: "k3's branch undo to run" });
    // A second retry while the first one's undo runs: nothing to do yet, and it says so.
    expect(await runtime.retryFailed('k3')).toMatchObject({
      retried: false,
      reason: 'in_progress',
    });
    await holder('k4');
    await open('k3:unhold');
    await waitFor(
      async () => (await runtime.getSaga('k3/prepare/hold'))?.status === 'compensated' || null,
      { what: "k3's branch to be undone" },
    );
    expect((await runtime.getSaga('k3'))?.status).toBe('failed');
    expect(await runtime.retryFailed('k3')).toMatchObject({ retried: false, reason: 'lock_busy' });
    await open('k4:settle');
    expect((await settled(runtime, 'k4')).status).toBe('completed');
    expect(await runtime.retryFailed('k3')).toMatchObject({ retried: true, step: 'prepare' });
    const k3 = await settled(runtime, 'k3', ['compensated']);
    expect(timeline(k3).slice(-1)).toEqual(['undo prepare:completed']);
    expect(mine('k1')).toEqual(['k1:unhold']);
    expect(mine('k3')).toEqual(['k3:unhold']);
  });

  it('joins exactly once when many branches end at the same instant on several workers', async () => {
    const wide = defineSaga({ name: 'wide', version: 1, input: z.object({ n: z.number() }) })
      .parallel('fan', (branch) => ({
        a: branch({ ...fast, run: (ctx) => ctx.input.n + 1 }),
        b: branch({ ...fast, run: (ctx) => ctx.input.n + 2 }),
        c: branch({ ...fast, run: (ctx) => ctx.input.n + 3 }),
        d: branch({ ...fast, run: (ctx) => ctx.input.n + 4 }),
      }))
      .step('sum', {
        ...fast,
        run: (ctx) => {
          const { a, b, c, d } = ctx.steps.fan;
          effects.push(`${ctx.sagaId}:sum`);
          return a + b + c + d;
        },
      });
    const { runtime } = await startSagas(db.pool, [wide]);
    // A second worker process's worth of connections: branch ends race on the parent's lock.
    const other = createSagaRuntime({ pool: db.pool, sagas: [wide], logger: silent });
    const worker = createWorker({
      pool: db.pool,
      jobs: other.jobs,
      logger: silent,
      concurrency: 8,
      pollIntervalMs: 20,
      sweeper: false,
      retention: false,
    });
    await worker.start();
    try {
      const ids = Array.from({ length: 40 }, (_, i) => `w${i}`);
      await Promise.all(ids.map((id, n) => runtime.start(wide, { id, input: { n } })));
      // One at a time: 40 pollers at once, each reading a saga every 25 ms, held the pool the
      // workers share and slowed the sagas past their wait on a loaded machine.
      const sagas = [];
      for (const id of ids) sagas.push(await settled(runtime, id));
      sagas.forEach((saga, n) => {
        expect(saga.status).toBe('completed');
        expect(saga.history.find((h) => h.step === 'sum')?.output).toBe(4 * n + 10);
      });
      for (const id of ids) expect(mine(id)).toEqual([`${id}:sum`]);
    } finally {
      await worker.stop({ timeoutMs: 1_000 });
      await other.close();
    }
  });

  it('survives a failure or a crash injected at every step and inside every branch (checkSagaCrashes)', async () => {
    const sturdy = defineSaga({ name: 'sturdy', version: 1, input: z.object({}) })
      .step('quote', { ...fast, run: () => 1, compensate: () => {} })
      .parallel('prepare', (branch) => ({
        stock: branch({ ...fast, run: () => 2, compensate: () => {} }),
        card: branch({ ...fast, run: () => 3, compensate: () => {} }),
        fraud: branch({ ...fast, run: () => 4 }),
      }))
      .step('confirm', { ...fast, run: (ctx) => ctx.steps.prepare.card });
    const report = await checkSagaCrashes({
      pool: db.pool,
      saga: sturdy,
      input: {},
      idPrefix: 'px',
      assert: false,
    });
    expect(report.runs.filter((r) => r.problems.length > 0)).toEqual([]);
    expect(report.runs.map((r) => `${r.mode} ${r.step} ${r.status}`)).toEqual(
      expect.arrayContaining([
        'fail prepare compensated',
        'crash prepare completed',
        'crash-compensation prepare compensated',
        // Inside each branch's own job too.
        'fail prepare.stock compensated',
        'fail prepare.fraud compensated',
        'crash prepare.card completed',
        'crash prepare.fraud completed',
        'crash-compensation prepare.stock compensated',
        'crash-compensation prepare.card compensated',
      ]),
    );
    // A crashed branch ran twice, the others once.
    const crashed = report.runs.find((r) => r.mode === 'crash' && r.step === 'prepare.card')!;
    expect(crashed.runs).toMatchObject({ 'prepare.card': 2, 'prepare.stock': 1 });
    expect(
      report.runs.some((r) => r.step === 'prepare.fraud' && r.mode === 'crash-compensation'),
    ).toBe(false);
    expect(report.ok).toBe(true);
  });

  it('refuses definitions that break the group rules, naming the step and branch', () => {
    const base = defineSaga({ name: 'bad_group', version: 1, input: z.object({}) });
    const run = () => null;
    const refused = (make: () => unknown) => {
      try {
        make();
      } catch (error) {
        expect(error).toBeInstanceOf(SagaDefinitionError);
        return (error as Error).message;
      }
      throw new Error('accepted');
    };
    expect(refused(() => base.parallel('g', () => ({ a: { run } })))).toMatch(
      /parallel step "g": a group has 2 to 32 branches, got 1/,
    );
    const many = Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`b${i}`, { run }]));
    expect(refused(() => base.parallel('g', () => many))).toMatch(/got 33/);
    expect(refused(() => base.parallel('g', () => ({ 'a b': { run }, c: { run } })))).toMatch(
      /branch name "a b" must be 1-48 letters/,
    );
    expect(refused(() => base.parallel('g', () => ({ a: { run }, b: {} })))).toMatch(
      /parallel step "g", branch "b": run must be a function/,
    );
    expect(
      refused(() => base.parallel('g', () => ({ a: { run }, b: { run, pivot: true } }))),
    ).toMatch(/branch "b": a branch is neither the pivot nor retriable/);
    const pivoted = base.step('charge', { pivot: true, run });
    expect(refused(() => pivoted.parallel('g', () => ({ a: { run }, b: { run } })))).toMatch(
      /parallel step "g" comes after the pivot "charge"/,
    );
    expect(refused(() => base.parallel('g', { a: { run }, b: { run } } as never))).toMatch(
      /parallel step "g": branches must be a function \(branch\) =>/,
    );
    expect(refused(() => base.parallel('g', () => [{ run }, { run }] as never))).toMatch(
      /branches must be a function/,
    );
    // Names each within bounds whose branch job type is not (before: accepted here, then the
    // queue's bare "invalid job type" from createSagaRuntime, naming no saga, group or branch).
    const long = defineSaga({
      name: 'fulfilment_of_customer_orders',
      version: 1,
      input: z.object({}),
    });
    const group = 'reserve_inventory_in_every_hub';
    const branch = 'warehouse_north_eastern_region';
    expect(refused(() => long.parallel(group, () => ({ [branch]: { run }, b: { run } })))).toMatch(
      /^saga "fulfilment_of_customer_orders": parallel step "reserve_inventory_in_every_hub", branch "warehouse_north_eastern_region": its job type saga:.*:compensate is 1[3-9]\d characters, over the queue's 128; shorten/,
    );
  });

  it('refuses a start whose branch ids would break the id rules, writing nothing', async () => {
    const { runtime } = await startSagas(db.pool, [checkout]);
    const id = 'x'.repeat(187);
    const refusal = await runtime
      .start(checkout, { id, input: { id: 'x' } })
      .catch((e: unknown) => e);
    expect(refusal).toBeInstanceOf(SagaValidationError);
    expect((refusal as Error).message).toContain(
      `its child saga id "${id}/prepare/stock" (step "prepare") must be at most 200 characters, got 201`,
    );
    expect(await runtime.getSaga(id)).toBeNull();
  });

  it('fails the group for good, naming the branch id, when another saga took that id', async () => {
    const { runtime } = await startSagas(db.pool, [checkout]);
    // A saga of its own whose id is what q1's stock branch would be.
    await runtime.start(checkout, { id: 'q1/prepare/stock', input: { id: 'q1-other' } });
    await runtime.start(checkout, { id: 'q1', input: { id: 'q1' } });
    const saga = await settled(runtime, 'q1');
    expect(saga.status).toBe('compensated');
    expect(saga.error).toContain(
      'parallel step "prepare": branch saga id "q1/prepare/stock" is already taken by another saga',
    );
    // Nothing of the group was left behind: its other branches rolled back with it.
    expect(await runtime.getSaga('q1/prepare/card')).toBeNull();
    expect(mine('q1')).toEqual(['q1:quote', 'q1:unquote']);
  });
});
