import { setTimeout as sleep } from 'node:timers/promises';
import { createClient, createSweeper, createWorker } from '@skiplock/queue';
import { LockKeys, tryAdvisoryLock } from '@skiplock/queue/engine';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createSagaRuntime, defineSaga } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { fast, settled, silent, startSagas, timeline } from './fixtures.js';

const db = await useTestDatabase();

const input = z.object({});
const v1 = defineSaga({ name: 'ver', version: 1, input })
  .step('a', { ...fast, run: () => 'v1-a', compensate: () => {} })
  .waitFor('go', { payload: z.object({}) })
  .step('b', { ...fast, run: (ctx) => `v1-b after ${ctx.steps.a}` });
const v2 = defineSaga({ name: 'ver', version: 2, input })
  .step('a', { ...fast, run: () => 'v2-a', compensate: () => {} })
  .step('c', { ...fast, run: () => 'v2-c' })
  .waitFor('go', { payload: z.object({}) })
  .step('b', { ...fast, run: (ctx) => `v2-b after ${ctx.steps.c}` });

describe('versions', () => {
  it('finishes an in-flight saga on its version while a newer one runs beside it', async () => {
    const { runtime } = await startSagas(db.pool, [v1, v2]);
    await runtime.start(v1, { id: 'old', input: {} });
    await settled(runtime, 'old', ['waiting']);
    await runtime.start(v2, { id: 'new', input: {} });
    await settled(runtime, 'new', ['waiting']);
    await runtime.signal('old', 'go', {});
    await runtime.signal('new', 'go', {});
    const [old, young] = [await settled(runtime, 'old'), await settled(runtime, 'new')];
    expect([old.version, old.status, young.version, young.status]).toEqual([
      1,
      'completed',
      2,
      'completed',
    ]);
    expect(old.history.map((h) => h.output)).toEqual(['v1-a', {}, 'v1-b after v1-a']);
    expect(young.history.map((h) => h.output)).toEqual(['v2-a', 'v2-c', {}, 'v2-b after v2-c']);
    const types = await db.pool.query(
      `SELECT DISTINCT job_type FROM skiplock.jobs WHERE idempotency_key LIKE 'saga:old:%'`,
    );
    expect(types.rows.map((r) => r.job_type).sort()).toEqual([
      'saga:ver:v1:a',
      'saga:ver:v1:b',
      'saga:ver:v1:go',
    ]);
  });

  it("a job of a version no worker knows goes dead, and with unknownVersions 'fail' the saga fails with the reason", async () => {
    const starter = createSagaRuntime({ pool: db.pool, sagas: [v1], logger: silent });
    await starter.start(v1, { id: 'orphan', input: {} });
    const { runtime, worker } = await startSagas(db.pool, [v2], {
      reconciler: { unknownVersions: 'fail' },
    });
    const jobId = (await runtime.getSaga('orphan'))!.currentJobId!;
    const dead = await waitFor(async () => {
      const job = await db.pool.query(
        `SELECT status, last_error FROM skiplock.jobs WHERE id = $1`,
        [jobId],
      );
      return job.rows[0].status === 'dead' ? job.rows[0] : null;
    });
    expect(dead.last_error).toMatch(/^unknown_type: unknown job type "saga:ver:v1:a"/);
    // The dead write commits before the worker lets go of the job: wait for that, not race it
    // (a CI run on PostgreSQL 15 saw 1 here).
    await waitFor(() => worker.inFlight === 0 || null, { what: 'the worker to let go of the job' });
    expect(await runtime.reconciler.runOnce()).toEqual({
      ran: true,
      reconciled: 1,
      sagaIds: ['orphan'],
      more: false,
      left: [],
    });
    const saga = await runtime.getSaga('orphan');
    expect(saga?.status).toBe('failed');
    expect(saga?.error).toMatch(
      /^job \d+ is dead: unknown_type: .*; no runtime here knows saga "ver" version 1$/,
    );
    // The step it was on stays in the history, failed, with its job.
    expect(saga?.history).toEqual([
      expect.objectContaining({ step: 'a', kind: 'step', status: 'failed', jobId }),
    ]);
    expect((await runtime.reconciler.runOnce()).reconciled).toBe(0);
    await starter.close();
  });
});

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

describe('sagas their runtime no longer has a definition for', () => {
  const retiredV1 = defineSaga({ name: 'retired', version: 1, input })
    .step('a', { ...fast, run: () => 1, compensate: () => {} })
    .sleep('nap', 300)
    .step('b', { ...fast, run: () => 2 });
  const retiredV2 = defineSaga({ name: 'retired', version: 2, input }).step('a', {
    ...fast,
    run: () => 1,
  });

  it("with unknownVersions 'fail', fails a saga of a retired version whose wake job died, instead of leaving it waiting", async () => {
    const { runtime: old, worker: oldWorker } = await startSagas(db.pool, [retiredV1]);
    await old.start(retiredV1, { id: 'sleeper', input: {} });
    await settled(old, 'sleeper', ['waiting']);
    await oldWorker.stop();
    // Only version 2 is deployed now: the wake job comes due and dies as an unknown type.
    const { runtime, worker } = await startSagas(db.pool, [retiredV2], {
      reconciler: { unknownVersions: 'fail' },
    });
    await untilDead('saga:sleeper:timeout:nap');
    await waitFor(() => worker.inFlight === 0 || null, { what: 'the worker to let go of the job' });
    // getSaga says so before any pass (before: null, the saga shown waiting).
    expect((await runtime.getSaga('sleeper'))?.stranded).toMatchObject({
      kind: 'timeout',
      key: 'saga:sleeper:timeout:nap',
      status: 'dead',
      lastError: expect.stringMatching(/^unknown_type: /),
    });
    // Before: skipped (no definition to tell whether the wait is timed), waiting for good.
    expect(await runtime.reconciler.runOnce()).toMatchObject({ sagaIds: ['sleeper'] });
    const saga = await runtime.getSaga('sleeper');
    expect(saga).toMatchObject({ status: 'failed', currentStep: null });
    expect(saga?.error).toMatch(
      /^timeout job \d+ is dead: unknown_type: .*; no runtime here knows saga "retired" version 1$/,
    );
    expect(saga?.history.at(-1)).toMatchObject({ step: 'nap', status: 'failed' });
    expect((await runtime.reconciler.runOnce()).reconciled).toBe(0);
  });

  it('leaves a retired version waiting after its pivot, as a wait an operator retried there waits on', async () => {
    const pivotedV1 = defineSaga({ name: 'pivoted', version: 1, input })
      .step('charge', { ...fast, pivot: true, run: () => 1 })
      .waitFor('packed', { payload: z.object({}), timeoutMs: 300 })
      .step('ship', { ...fast, retriable: true, run: () => 2 });
    const pivotedV2 = defineSaga({ name: 'pivoted', version: 2, input }).step('x', {
      ...fast,
      run: () => 1,
    });
    const { runtime: old, worker: oldWorker } = await startSagas(db.pool, [pivotedV1]);
    await old.start(pivotedV1, { id: 'past-pivot', input: {} });
    await settled(old, 'past-pivot', ['waiting']);
    await oldWorker.stop();
    const { runtime, worker } = await startSagas(db.pool, [pivotedV2]);
    await untilDead('saga:past-pivot:timeout:packed');
    await waitFor(() => worker.inFlight === 0 || null, { what: 'the worker to let go of the job' });
    // The dead job could be what is left of a wait an operator retried (retryFailed puts it back
    // to waiting with no timeout job, the dead one still under the key): before, failed again
    // on every pass of a runtime without this version.
    expect((await runtime.reconciler.runOnce()).reconciled).toBe(0);
    expect(await runtime.getSaga('past-pivot')).toMatchObject({
      status: 'waiting',
      stranded: null,
    });
  });

  it("refuses to cancel a saga at a step its version no longer has; the reconciler leaves it, or with 'fail' fails it", async () => {
    const before = defineSaga({ name: 'renamed', version: 1, input })
      .step('a', { ...fast, run: () => 1, compensate: () => {} })
      .waitFor('go', { payload: z.object({}) });
    // The same version with its steps renamed, against the rule to define a new version.
    const after = defineSaga({ name: 'renamed', version: 1, input })
      .step('first', { ...fast, run: () => 1, compensate: () => {} })
      .waitFor('proceed', { payload: z.object({}) });
    const { runtime: old, worker: oldWorker } = await startSagas(db.pool, [before]);
    await old.start(before, { id: 'parked', input: {} });
    await settled(old, 'parked', ['waiting']);
    await oldWorker.stop();
    const starter = createSagaRuntime({ pool: db.pool, sagas: [before], logger: silent });
    await starter.start(before, { id: 'stranded', input: {} });
    await starter.close();
    const { runtime, worker } = await startSagas(db.pool, [after]);
    // Before: accepted and ended cancelled, with step a never compensated.
    await expect(runtime.cancel('parked')).rejects.toThrow(
      /^saga "parked" is at step "go", which version 1 of saga "renamed" does not have/,
    );
    expect((await runtime.getSaga('parked'))?.status).toBe('waiting');
    // Its first step's job dies as an unknown type; the reconciler fails the saga. Before: it
    // threw on the missing step, rolling back every pass.
    await untilDead('saga:stranded:a');
    await waitFor(() => worker.inFlight === 0 || null, { what: 'the worker to let go of the job' });
    // By default it is left for a runtime that still has the step (before: failed, with step a
    // never compensated).
    expect(await runtime.reconciler.runOnce()).toMatchObject({ sagaIds: [], left: ['stranded'] });
    expect((await runtime.getSaga('stranded'))?.status).toBe('running');
    const failing = createSagaRuntime({
      pool: db.pool,
      sagas: [after],
      logger: silent,
      reconciler: { unknownVersions: 'fail' },
    });
    expect(await failing.reconciler.runOnce()).toMatchObject({ sagaIds: ['stranded'], left: [] });
    await failing.close();
    expect((await runtime.getSaga('stranded'))?.error).toMatch(
      /; version 1 of saga "renamed" has no step "a" \(renamed without a new version\?\)$/,
    );
  });
});

describe('stale leases', () => {
  it("compensates a saga whose step's last lease expired through the sweeper alone, with no reconciler", async () => {
    const undone: string[] = [];
    const saga = defineSaga({ name: 'expired', version: 1, input })
      .step('a', { ...fast, run: () => 1, compensate: (ctx) => void undone.push(ctx.sagaId) })
      .step('b', { ...fast, maxAttempts: 2, run: () => 2 });
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [saga], logger: silent });
    // Never started here, and stopped for good: nothing but the sweeper may move the saga.
    await runtime.reconciler.stop();
    await runtime.start(saga, { id: 'ex', input: {} });
    // The worker's own sweeper, which knows the saga's job types (not started: driven by hand).
    const worker = createWorker({
      pool: db.pool,
      jobs: runtime.jobs,
      logger: silent,
      sweeper: {},
      retention: false,
      listen: false,
    });
    await waitFor(async () => (await worker.runOnce()) === 1);
    const b = (await runtime.getSaga('ex'))!;
    expect(b.currentStep).toBe('b');
    // Its worker died holding b's last attempt: the lease ran out and nobody settled it.
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'processing', attempts = max_attempts, locked_by = 'gone',
              locked_at = now(), lease_expires_at = now() - interval '1 second' WHERE id = $1`,
      [b.currentJobId],
    );
    expect(await worker.sweeper!.runOnce()).toMatchObject({ dead: 1, jobIds: [b.currentJobId] });
    // The step's dead-letter hook ran in the sweep's transaction: the saga already compensates.
    const swept = (await runtime.getSaga('ex'))!;
    expect([swept.status, swept.currentStep]).toEqual(['compensating', 'a']);
    await waitFor(async () => (await worker.runOnce()) === 1);
    const done = (await runtime.getSaga('ex'))!;
    expect(done.status).toBe('compensated');
    expect(timeline(done)).toEqual(['a:completed', 'b:failed', 'undo a:completed']);
    expect(done.history[1]?.error).toBe(
      'max_attempts: lease expired: worker gone stopped heartbeating',
    );
    // No attempt's end was recorded (the worker was gone): the count and start come from the job.
    expect(done.history[1]).toMatchObject({ attempts: 2 });
    expect(done.history[1]!.startedAt).toBeInstanceOf(Date);
    expect(undone).toEqual(['ex']);
    await worker.stop();
    await runtime.close();
  });
});

describe('the reconciler', () => {
  it("compensates a saga whose step job a sweeper killed without the saga's dead-letter hook", async () => {
    const undone: string[] = [];
    const saga = defineSaga({ name: 'swept', version: 1, input })
      .step('a', { ...fast, run: () => 1, compensate: (ctx) => void undone.push(ctx.sagaId) })
      .step('b', { ...fast, maxAttempts: 2, run: () => 2 });
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [saga], logger: silent });
    await runtime.start(saga, { id: 'sw', input: {} });
    const worker = createWorker({
      pool: db.pool,
      jobs: runtime.jobs,
      logger: silent,
      sweeper: false,
      retention: false,
    });
    await waitFor(async () => (await worker.runOnce()) === 1);
    const b = (await runtime.getSaga('sw'))!;
    expect(b.currentStep).toBe('b');
    // Its worker died holding b's last attempt: the lease ran out and nobody settled it.
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'processing', attempts = max_attempts, locked_by = 'gone',
              locked_at = now(), lease_expires_at = now() - interval '1 second' WHERE id = $1`,
      [b.currentJobId],
    );
    // A sweeper on a host that does not define the saga kills the job without its hook.
    expect((await createSweeper({ pool: db.pool, logger: silent }).runOnce()).dead).toBe(1);
    expect((await runtime.getSaga('sw'))?.status).toBe('running');

    expect((await runtime.reconciler.runOnce()).sagaIds).toEqual(['sw']);
    await waitFor(async () => (await worker.runOnce()) === 1);
    const done = (await runtime.getSaga('sw'))!;
    expect(done.status).toBe('compensated');
    expect(timeline(done)).toEqual(['a:completed', 'b:failed', 'undo a:completed']);
    expect(done.history[1]?.error).toMatch(/^job \d+ is dead: lease expired: worker gone/);
    expect(done.history[1]).toMatchObject({ attempts: 2 });
    expect(done.history[1]!.startedAt).toBeInstanceOf(Date);
    expect(undone).toEqual(['sw']);
    await worker.stop();
    await runtime.close();
  });

  it('pages through live sagas, so slow healthy ones never hide a stranded one for long', async () => {
    const saga = defineSaga({ name: 'paged', version: 1, input }).step('a', {
      ...fast,
      run: () => 1,
    });
    const runtime = createSagaRuntime({
      pool: db.pool,
      sagas: [saga],
      logger: silent,
      reconciler: { batchSize: 2 },
    });
    // No worker runs: every saga waits on its pending first job, the oldest two healthy.
    for (const id of ['p1', 'p2', 'p3']) await runtime.start(saga, { id, input: {} });
    const stranded = (await runtime.getSaga('p3'))!.currentJobId;
    await db.pool.query(`UPDATE skiplock.jobs SET status = 'cancelled' WHERE id = $1`, [stranded]);
    // A page of 2 of the 3 live sagas: one more pass to have looked at every one.
    expect(await runtime.reconciler.runOnce()).toMatchObject({
      ran: true,
      reconciled: 0,
      more: true,
    });
    expect(await runtime.reconciler.runOnce()).toMatchObject({ reconciled: 1, sagaIds: ['p3'] });
    expect((await runtime.getSaga('p3'))!.status).toBe('compensated');
    expect((await runtime.getSaga('p1'))!.status).toBe('running');
    await runtime.close();
  });

  it('fails a wait whose timeout job an operator cancelled, and leaves one with a live timeout', async () => {
    const saga = defineSaga({ name: 'timed', version: 1, input })
      .step('a', { ...fast, run: () => 1, compensate: () => {} })
      .waitFor('go', { payload: z.object({}), timeoutMs: 60_000 })
      .step('b', { ...fast, run: () => 2 });
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [saga], logger: silent });
    const worker = createWorker({
      pool: db.pool,
      jobs: runtime.jobs,
      logger: silent,
      sweeper: false,
      retention: false,
      listen: false,
    });
    for (const id of ['t-cut', 't-live']) {
      await runtime.start(saga, { id, input: {} });
      await waitFor(async () => {
        await worker.runOnce();
        return (await runtime.getSaga(id))?.status === 'waiting';
      });
    }
    // The operator cancels one saga's timeout job (it would otherwise fire in a minute).
    const { rows } = await db.pool.query<{ id: string }>(
      `SELECT id::text FROM skiplock.jobs WHERE idempotency_key = 'saga:t-cut:timeout:go'`,
    );
    const client = createClient({ pool: db.pool, logger: silent });
    expect(await client.cancelJob(rows[0]!.id)).toBe(true);
    const pass = await runtime.reconciler.runOnce();
    expect(pass.sagaIds).toContain('t-cut');
    await waitFor(async () => {
      await worker.runOnce();
      return (await runtime.getSaga('t-cut'))?.status === 'compensated';
    });
    const cut = (await runtime.getSaga('t-cut'))!;
    expect(cut.history.find((h) => h.step === 'go')).toMatchObject({
      status: 'failed',
      error: `timeout job ${rows[0]!.id} is cancelled: no error recorded`,
    });
    expect((await runtime.getSaga('t-live'))!.status).toBe('waiting');
    expect((await runtime.reconciler.runOnce()).reconciled).toBe(0);
    await client.close();
    await runtime.close();
  });

  it('compensates a step an operator stopped while it ran only once its handler has returned', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let running = false;
    const undone: string[] = [];
    const saga = defineSaga({ name: 'stopped-step', version: 1, input })
      .step('a', {
        ...fast,
        run: () => 1,
        compensate: () => void undone.push(`a (b running: ${running})`),
      })
      // Ignores its signal until the gate opens: a handler busy in a call it cannot abort.
      .step('b', {
        ...fast,
        // Its worker sees the stop at its first renewal, 1 s in; the stopped lease runs out 2 s
        // after that.
        leaseMs: 3_000,
        run: async () => {
          running = true;
          await gate;
          running = false;
          return 2;
        },
      });
    const { runtime, worker } = await startSagas(db.pool, [saga]);
    const lost: string[] = [];
    worker.on('job:lock_lost', (e) => lost.push(e.jobId));
    await runtime.start(saga, { id: 'stopped', input: {} });
    await waitFor(() => running, { what: "step b's handler running" });
    const { rows } = await db.pool.query<{ id: string }>(
      `SELECT id::text FROM skiplock.jobs WHERE idempotency_key = 'saga:stopped:b'`,
    );
    const client = createClient({ pool: db.pool, logger: silent });
    try {
      expect(await client.cancelJob(rows[0]!.id, { running: true })).toBe(true);
      // Before: this pass failed the step at once, and step a was undone beside b's handler.
      expect(await runtime.reconciler.runOnce()).toMatchObject({ reconciled: 0 });
      // Its worker has seen the stop and ended the attempt; the step's code still runs.
      await waitFor(() => lost.length === 1, { what: 'the worker to see the stop' });
      await sleep(300);
      // Before: the saga's handler gave up on the step's code at the abort and returned, its
      // worker cleared the stopped run's lease, and this pass undid step a beside b's code.
      const { rows: held } = await db.pool.query<{ live: boolean }>(
        'SELECT lease_expires_at > now() AS live FROM skiplock.jobs WHERE id = $1',
        [rows[0]!.id],
      );
      expect(held).toEqual([{ live: true }]);
      expect(await runtime.reconciler.runOnce()).toMatchObject({ reconciled: 0 });
      // Not stranded either: the reconciler waits for it (before, `sagas show` and the dashboard
      // said stranded and sent the operator to a reconcile pass that did nothing).
      expect(await runtime.getSaga('stopped')).toMatchObject({ status: 'running', stranded: null });
      expect(running).toBe(true);
      release();
      // Its worker gives the stopped run's lease back once the handler has returned.
      await waitFor(async () => {
        const { rows: lease } = await db.pool.query(
          'SELECT 1 FROM skiplock.jobs WHERE id = $1 AND lease_expires_at IS NULL',
          [rows[0]!.id],
        );
        return lease.length === 1;
      });
      expect(await runtime.reconciler.runOnce()).toMatchObject({
        reconciled: 1,
        sagaIds: ['stopped'],
      });
      const ended = await settled(runtime, 'stopped');
      expect(ended.status).toBe('compensated');
      expect(undone).toEqual(['a (b running: false)']);
      expect(ended.history.find((h) => h.step === 'b')).toMatchObject({
        status: 'failed',
        error: expect.stringContaining('cancelled'),
      });
    } finally {
      release();
      await client.close();
    }
  });

  it('runs one pass at a time across processes', async () => {
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [v1], logger: silent });
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      // The queue's lock namespace, the reconciler's key (`LockKeys.sagaReconcile`).
      expect(await tryAdvisoryLock(client, LockKeys.sagaReconcile)).toBe(true);
      expect(await runtime.reconciler.runOnce()).toEqual({
        ran: false,
        reconciled: 0,
        sagaIds: [],
        more: false,
        left: [],
      });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    expect((await runtime.reconciler.runOnce()).ran).toBe(true);
    await runtime.close();
  });
});

describe("getSaga's stranded on a waiting saga", () => {
  const timed = defineSaga({ name: 'stuck-wait', version: 1, input })
    .step('a', { ...fast, run: () => 1, compensate: () => {} })
    .waitFor('go', { payload: z.object({}), timeoutMs: 60_000 })
    .step('b', { ...fast, run: () => 2 });
  // Waits for its signal only, unless started with a deadline (then its timeout job is due then).
  const untimed = defineSaga({ name: 'signal-only', version: 1, input })
    .step('a', { ...fast, run: () => 1, compensate: () => {} })
    .waitFor('go', { payload: z.object({}) })
    .step('b', { ...fast, run: () => 2 });
  const napper = defineSaga({ name: 'napper', version: 1, input })
    .step('a', { ...fast, run: () => 1, compensate: () => {} })
    .sleep('nap', 60_000)
    .step('b', { ...fast, run: () => 2 });
  const paid = defineSaga({ name: 'paid-wait', version: 1, input })
    .step('charge', { ...fast, pivot: true, run: () => 1 })
    .waitFor('go', { payload: z.object({}), timeoutMs: 60_000 })
    .step('ship', { ...fast, retriable: true, run: () => 2 });
  // Its parent waits on it (no timeout job of its own, even under a deadline).
  const child = defineSaga({ name: 'held-child', version: 1, input }).waitFor('go', {
    payload: z.object({}),
  });
  const parent = defineSaga({ name: 'held-parent', version: 1, input })
    .step('a', { ...fast, run: () => 1, compensate: () => {} })
    .child('sub', child, () => ({}));
  const all = [timed, untimed, napper, paid, child, parent];

  const timeoutJob = async (key: string) =>
    (
      await db.pool.query<{ id: string }>(
        `SELECT id::text FROM skiplock.jobs WHERE idempotency_key = $1`,
        [key],
      )
    ).rows[0]!.id;

  it('names a timeout job an operator cancelled, and says nothing of a live one or a wait with none', async () => {
    const { runtime } = await startSagas(db.pool, all);
    await runtime.start(timed, { id: 'sw-cut', input: {} });
    await runtime.start(timed, { id: 'sw-live', input: {} });
    await runtime.start(untimed, { id: 'sw-signal', input: {} });
    await runtime.start(paid, { id: 'sw-paid', input: {} });
    for (const id of ['sw-cut', 'sw-live', 'sw-signal', 'sw-paid']) {
      await settled(runtime, id, ['waiting']);
    }
    const cut = await timeoutJob('saga:sw-cut:timeout:go');
    const client = createClient({ pool: db.pool, logger: silent });
    expect(await client.cancelJob(cut)).toBe(true);
    // After the pivot the reconciler leaves a wait alone (one an operator retried there waits
    // with its old timeout job still under the key): so does getSaga.
    expect(await client.cancelJob(await timeoutJob('saga:sw-paid:timeout:go'))).toBe(true);
    await client.close();

    // Before: null, the saga shown `waiting` as if its timeout would still end the wait.
    expect((await runtime.getSaga('sw-cut'))?.stranded).toEqual({
      kind: 'timeout',
      jobId: cut,
      key: 'saga:sw-cut:timeout:go',
      status: 'cancelled',
      lastError: null,
    });
    expect((await runtime.getSaga('sw-live'))?.stranded).toBeNull();
    expect((await runtime.getSaga('sw-signal'))?.stranded).toBeNull();
    expect((await runtime.getSaga('sw-paid'))?.stranded).toBeNull();
    // The reconciler agrees on each.
    const moved = (await runtime.reconciler.runOnce()).sagaIds;
    expect(moved).toContain('sw-cut');
    for (const id of ['sw-live', 'sw-signal', 'sw-paid']) expect(moved).not.toContain(id);
  });

  it('names a dead wake job, and a timeout job deleted under a deadline by its key', async () => {
    const { runtime } = await startSagas(db.pool, all);
    await runtime.start(napper, { id: 'sw-dead', input: {} });
    await runtime.start(untimed, { id: 'sw-gone', input: {}, deadlineMs: 60_000 });
    await runtime.start(timed, { id: 'sw-kept', input: {}, deadlineMs: 60_000 });
    await runtime.start(parent, { id: 'sw-parent', input: {}, deadlineMs: 60_000 });
    for (const id of ['sw-dead', 'sw-gone', 'sw-kept', 'sw-parent']) {
      await settled(runtime, id, ['waiting']);
    }
    const dead = await timeoutJob('saga:sw-dead:timeout:nap');
    // As a worker without the saga's job types leaves it: dead, no saga hook ran.
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'dead', attempts = 1,
         last_error = 'unknown job type "saga:napper:v1:nap:timeout"' WHERE id = $1`,
      [dead],
    );
    await db.pool.query(`DELETE FROM skiplock.jobs WHERE id = $1`, [
      await timeoutJob('saga:sw-gone:timeout:go'),
    ]);

    // Before: null for both, each shown `waiting` for good.
    expect((await runtime.getSaga('sw-dead'))?.stranded).toEqual({
      kind: 'timeout',
      jobId: dead,
      key: 'saga:sw-dead:timeout:nap',
      status: 'dead',
      lastError: 'unknown job type "saga:napper:v1:nap:timeout"',
    });
    expect((await runtime.getSaga('sw-gone'))?.stranded).toEqual({
      kind: 'timeout',
      jobId: null,
      key: 'saga:sw-gone:timeout:go',
      status: 'missing',
      lastError: null,
    });
    expect((await runtime.getSaga('sw-kept'))?.stranded).toBeNull();
    // A parent waiting on its child under a deadline has no timeout job to miss.
    expect((await runtime.getSaga('sw-parent'))?.stranded).toBeNull();
    const moved = (await runtime.reconciler.runOnce()).sagaIds;
    expect(moved).toEqual(expect.arrayContaining(['sw-dead', 'sw-gone']));
    for (const id of ['sw-kept', 'sw-parent']) expect(moved).not.toContain(id);
    expect((await runtime.getSaga('sw-gone'))?.stranded).toBeNull();
  });
});
