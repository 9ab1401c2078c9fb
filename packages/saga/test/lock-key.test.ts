import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createSagaRuntime,
  defineSaga,
  SagaDefinitionError,
  SagaError,
  SagaLockedError,
  type SagaRuntime,
} from '../src/index.js';
import { runSql } from '@skiplock/queue/engine';
import { lockKeyTurn } from '../src/sql/locks.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { captureLogs, fast, settled, silent, startSagas, timeline } from './fixtures.js';

const db = await useTestDatabase();

const account = z.object({ account: z.string(), fail: z.boolean().optional() });
/** Which saga ran which step, in order: the tests read the order of turns from it. */
const ran: string[] = [];
/** Each saga's `hold` step waits for its gate to open, so a test decides when a holder ends. */
const gates = new Map<string, () => void>();
const gate = (sagaId: string) =>
  new Promise<void>((resolve) => {
    gates.set(sagaId, resolve);
  });
const open = async (sagaId: string) => {
  await waitFor(() => gates.has(sagaId) || null, { what: `saga ${sagaId} to reach hold` });
  gates.get(sagaId)!();
  gates.delete(sagaId);
};

function billing(name: string, whenLocked?: 'queue' | 'refuse', version = 1) {
  return defineSaga({
    name,
    version,
    input: account,
    lockKey: (input) => `account:${input.account}`,
    ...(whenLocked ? { whenLocked } : {}),
  })
    .step('debit', {
      ...fast,
      run: (ctx) => void ran.push(`${ctx.sagaId}:debit`),
      compensate: (ctx) => void ran.push(`${ctx.sagaId}:undo-debit`),
    })
    .step('hold', {
      ...fast,
      maxAttempts: 1,
      run: async (ctx) => {
        await gate(ctx.sagaId);
        if (ctx.input.fail) throw new Error('declined');
      },
    });
}

const queued = billing('locked_queue');
const refusing = billing('locked_refuse', 'refuse');

async function rowStatus(id: string) {
  const { rows } = await db.pool.query<{ status: string; lock_key: string | null }>(
    'SELECT status, lock_key FROM skiplock.sagas WHERE id = $1',
    [id],
  );
  return rows[0];
}

describe('one active saga per lock key', () => {
  it('queues later starts with the key and starts them in start order as each one ends', async () => {
    const { runtime } = await startSagas(db.pool, [queued]);
    const a = await runtime.start(queued, { id: 'q-3', input: { account: '1' } });
    const b = await runtime.start(queued, { id: 'q-2', input: { account: '1' } });
    const c = await runtime.start(queued, { id: 'q-1', input: { account: '1' } });
    // Another key is not held up.
    const other = await runtime.start(queued, { id: 'q-other', input: { account: '2' } });
    expect([a, b, c, other].map((r) => [r.started, r.status])).toEqual([
      [true, 'running'],
      [true, 'queued'],
      [true, 'queued'],
      [true, 'running'],
    ]);
    await open('q-other');
    expect((await settled(runtime, 'q-other')).status).toBe('completed');
    const view = await runtime.getSaga('q-2');
    expect(view).toMatchObject({ status: 'queued', lockKey: 'account:1', currentStep: null });
    expect(view!.history).toEqual([]);
    expect(ran).not.toContain('q-2:debit');

    await open('q-3');
    expect((await settled(runtime, 'q-3')).status).toBe('completed');
    await open('q-2');
    expect((await settled(runtime, 'q-2')).status).toBe('completed');
    await open('q-1');
    expect((await settled(runtime, 'q-1')).status).toBe('completed');
    // Started q-3, q-2, q-1: the turns follow the starts, not the ids.
    const turns = ran.filter((r) => /^q-[123]:debit$/.test(r));
    expect(turns).toEqual(['q-3:debit', 'q-2:debit', 'q-1:debit']);
    // A repeated start of a queued or finished saga is the same saga, as without a key.
    expect(await runtime.start(queued, { id: 'q-2', input: { account: '1' } })).toEqual({
      id: 'q-2',
      started: false,
      status: 'completed',
    });
  });

  it('hands the key on when the holder compensates or is cancelled, and skips a cancelled queued saga', async () => {
    const { runtime } = await startSagas(db.pool, [queued]);
    await runtime.start(queued, { id: 'h-1', input: { account: 'h', fail: true } });
    await runtime.start(queued, { id: 'h-2', input: { account: 'h' } });
    await runtime.start(queued, { id: 'h-3', input: { account: 'h' } });
    await runtime.start(queued, { id: 'h-4', input: { account: 'h' } });
    // Cancelled while queued: it ends at once, with nothing run, and holds no one up.
    expect(await runtime.cancel('h-2')).toEqual({ accepted: true, status: 'cancelled' });
    expect(await runtime.getSaga('h-2')).toMatchObject({ status: 'cancelled', history: [] });

    await open('h-1');
    const failed = await settled(runtime, 'h-1');
    expect(failed.status).toBe('compensated');
    expect(timeline(failed)).toEqual(['debit:completed', 'hold:failed', 'undo debit:completed']);
    // h-3 got the key; cancel it while its step waits: it compensates and h-4 goes on.
    await waitFor(() => gates.has('h-3') || null, { what: 'h-3 to hold' });
    expect(await rowStatus('h-4')).toMatchObject({ status: 'queued' });
    expect((await runtime.cancel('h-3')).accepted).toBe(true);
    await open('h-3');
    expect((await settled(runtime, 'h-3')).status).toBe('cancelled');
    await open('h-4');
    expect((await settled(runtime, 'h-4')).status).toBe('completed');
    expect(ran.filter((r) => r.startsWith('h-2:'))).toEqual([]);
  });

  it("cancels a queued saga while its key's holder ends, each waiting for the other's lock", async () => {
    const crossing = billing('locked_crossing');
    const { runtime } = await startSagas(db.pool, [crossing]);
    await runtime.start(crossing, { id: 'x-holder', input: { account: 'x' } });
    expect(await runtime.start(crossing, { id: 'x-queued', input: { account: 'x' } })).toEqual({
      id: 'x-queued',
      started: true,
      status: 'queued',
    });
    await waitFor(() => gates.has('x-holder') || null, { what: 'x-holder to hold' });
    // Backends of this database waiting for an advisory lock (the key's turn).
    const waiting = async () =>
      (
        await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
           WHERE datname = current_database() AND wait_event_type = 'Lock'
             AND wait_event = 'advisory'`,
        )
      ).rows[0]!.n;
    // The key's turn lock held from outside for a moment, so that the holder's end takes it
    // before the cancel asks for it.
    const outside = await db.pool.connect();
    try {
      await outside.query('BEGIN');
      await outside.query(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, [
        'skiplock.saga:locked_crossing:account:x',
      ]);
      await open('x-holder');
      await waitFor(async () => (await waiting()) >= 1 || null, { what: "the holder's end" });
      const cancelling = runtime.cancel('x-queued').catch((e: unknown) => e);
      await waitFor(async () => (await waiting()) >= 2 || null, { what: 'the cancel' });
      await outside.query('COMMIT');
      // Before: the cancel held the queued row and waited for the turn the holder's end held,
      // which then wanted that row: deadlock detected (40P01), the cancel lost, the saga ran.
      const cancelled = await cancelling;
      expect(cancelled).not.toBeInstanceOf(Error);
      expect(cancelled).toMatchObject({ accepted: true });
    } finally {
      outside.release();
    }
    expect((await settled(runtime, 'x-holder')).status).toBe('completed');
    // The holder's end started it first; the cancel stopped it then (its step's job, or once the
    // step it was running settled).
    const queuedOne = await waitFor(
      async () => {
        const view = await runtime.getSaga('x-queued');
        if (view && ['cancelled', 'completed', 'compensated', 'failed'].includes(view.status)) {
          return view;
        }
        if (gates.has('x-queued')) await open('x-queued');
        return null;
      },
      { what: 'x-queued to end' },
    );
    expect(queuedOne.status).toBe('cancelled');
  });

  it('refuses a second start with the key when the definition says so, writing nothing', async () => {
    const { runtime } = await startSagas(db.pool, [refusing]);
    await runtime.start(refusing, { id: 'r-1', input: { account: 'r' } });
    const refusal = await runtime
      .start(refusing, { id: 'r-2', input: { account: 'r' } })
      .catch((e: unknown) => e);
    expect(refusal).toBeInstanceOf(SagaLockedError);
    expect(refusal).toMatchObject({
      code: 'saga_locked',
      heldBy: 'r-1',
      sagaName: 'locked_refuse',
    });
    // The message names the holder, not the key (it comes from the input).
    expect((refusal as Error).message).not.toContain('account:r');
    expect(await rowStatus('r-2')).toBeUndefined();
    // The holder's own repeated start is not a second saga.
    expect(await runtime.start(refusing, { id: 'r-1', input: { account: 'r' } })).toMatchObject({
      started: false,
      status: 'running',
    });
    await open('r-1');
    await settled(runtime, 'r-1');
    // Free again: the next start runs.
    expect(await runtime.start(refusing, { id: 'r-2', input: { account: 'r' } })).toMatchObject({
      started: true,
      status: 'running',
    });
    await open('r-2');
    expect((await settled(runtime, 'r-2')).status).toBe('completed');
  });

  it('lets a failed saga go of its key, and retries it only while the key is free', async () => {
    const pivoting = defineSaga({
      name: 'locked_pivot',
      version: 1,
      input: account,
      lockKey: (input) => input.account,
    })
      .step('charge', { ...fast, pivot: true, run: () => 1 })
      .step('ship', {
        ...fast,
        retriable: true,
        maxAttempts: 1,
        run: async (ctx) => {
          await gate(ctx.sagaId);
          if (ctx.input.fail) throw new Error('carrier down');
        },
      });
    const { runtime } = await startSagas(db.pool, [pivoting]);
    await runtime.start(pivoting, { id: 'f-1', input: { account: 'f', fail: true } });
    await runtime.start(pivoting, { id: 'f-2', input: { account: 'f' } });
    await open('f-1');
    expect((await settled(runtime, 'f-1')).status).toBe('failed');
    // f-2 took the key; an operator's retry of f-1 waits until f-2 is done.
    await waitFor(() => gates.has('f-2') || null, { what: 'f-2 to hold' });
    expect(await runtime.retryFailed('f-1')).toMatchObject({ retried: false, reason: 'lock_busy' });
    expect(await rowStatus('f-1')).toMatchObject({ status: 'failed' });
    await open('f-2');
    await settled(runtime, 'f-2');
    expect(await runtime.retryFailed('f-1')).toMatchObject({ retried: true, step: 'ship' });
    await open('f-1');
    expect((await settled(runtime, 'f-1')).status).toBe('failed');
  });

  it('keeps a second active saga out even when written by hand (the unique index)', async () => {
    const { runtime } = await startSagas(db.pool, [queued]);
    await runtime.start(queued, { id: 'x-1', input: { account: 'x' } });
    await runtime.start(queued, { id: 'x-2', input: { account: 'x' } });
    const forced = await db.pool
      .query(`UPDATE skiplock.sagas SET status = 'running' WHERE id = 'x-2'`)
      .catch((e: { code?: string; constraint?: string }) => e);
    expect(forced).toMatchObject({ code: '23505', constraint: 'sagas_lock_key_active_idx' });
    await open('x-1');
    await open('x-2');
    expect((await settled(runtime, 'x-2')).status).toBe('completed');
  });

  it("starts a key's queue again from the reconciler when its holder is gone", async () => {
    const { logger, lines } = captureLogs();
    const { runtime } = await startSagas(db.pool, [queued], { logger });
    await runtime.start(queued, { id: 'o-1', input: { account: 'o' } });
    await runtime.start(queued, { id: 'o-2', input: { account: 'o' } });
    await waitFor(() => gates.has('o-1') || null, { what: 'o-1 to hold' });
    // An operator deletes the holder by hand: no end of its hands the key on.
    await db.pool.query(`DELETE FROM skiplock.sagas WHERE id = 'o-1'`);
    expect(await rowStatus('o-2')).toMatchObject({ status: 'queued' });
    const pass = await runtime.reconciler.runOnce();
    expect(pass.sagaIds).toContain('o-2');
    expect(lines).toContainEqual(expect.objectContaining({ reason: 'saga_turn', sagaId: 'o-2' }));
    await open('o-1');
    await open('o-2');
    expect((await settled(runtime, 'o-2')).status).toBe('completed');
    // Nothing is queued without a holder now: the next pass has nothing to start.
    expect((await runtime.reconciler.runOnce()).sagaIds).not.toContain('o-2');
  });

  it("reconciles a stranded holder without waiting for its key's turn that a producer holds, and starts the queue once it is free", async () => {
    // Its only step waits at its gate: stranded there, nothing is left to compensate, so the
    // reconciler's pass ends it and hands the key on.
    const first = defineSaga({
      name: 'turn_first',
      version: 1,
      input: account,
      lockKey: (input) => `account:${input.account}`,
    }).step('hold', {
      ...fast,
      maxAttempts: 1,
      run: async (ctx) => {
        await gate(ctx.sagaId);
      },
    });
    const { runtime } = await startSagas(db.pool, [first]);
    await runtime.start(first, { id: 't-1', input: { account: 't' } });
    await runtime.start(first, { id: 't-2', input: { account: 't' } });
    await waitFor(() => gates.has('t-1') || null, { what: 't-1 to hold' });
    // Its job died unseen (its hook never ran): t-1 is stranded.
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'dead', lease_expires_at = NULL
       WHERE id = (SELECT current_job_id FROM skiplock.sagas WHERE id = 't-1')`,
    );
    // A producer's transaction holds the key's turn (an open start({ tx }) of the key).
    const producer = await db.pool.connect();
    try {
      await producer.query('BEGIN');
      await runSql(producer, lockKeyTurn('turn_first', 'account:t'));
      // Before: the pass waited for the producer, holding its page of live sagas locked.
      const pass = runtime.reconciler.runOnce();
      const timedOut = new Promise<'waited'>((r) => setTimeout(() => r('waited'), 5_000));
      const result = await Promise.race([pass, timedOut]);
      expect(result).not.toBe('waited');
      expect(result).toMatchObject({ sagaIds: ['t-1'] });
      expect(await rowStatus('t-2')).toMatchObject({ status: 'queued' });
      await producer.query('COMMIT');
    } finally {
      await producer.query('ROLLBACK').catch(() => {});
      producer.release();
    }
    // Free: the next pass starts the key's queue.
    expect((await runtime.reconciler.runOnce()).sagaIds).toContain('t-2');
    await open('t-1');
    await open('t-2');
    expect((await settled(runtime, 't-2')).status).toBe('completed');
  });

  it("with lockWaitMs, a cancel of a queued saga whose key's turn a producer holds fails saga_busy", async () => {
    const { runtime } = await startSagas(db.pool, [queued]);
    await runtime.start(queued, { id: 'kb-1', input: { account: 'kb' } });
    await runtime.start(queued, { id: 'kb-2', input: { account: 'kb' } });
    await waitFor(() => gates.has('kb-1') || null, { what: 'kb-1 to hold' });
    // A producer's transaction holds the key's turn (an open start({ tx }) of the key).
    const producer = await db.pool.connect();
    try {
      await producer.query('BEGIN');
      await runSql(producer, lockKeyTurn('locked_queue', 'account:kb'));
      const cancel = runtime.cancel('kb-2', { lockWaitMs: 200 });
      const timedOut = new Promise<'waited'>((r) => setTimeout(() => r('waited'), 5_000));
      const result = await Promise.race([cancel.catch((error: unknown) => error), timedOut]);
      expect(result).toMatchObject({
        code: 'saga_busy',
        message: expect.stringMatching(/^saga "kb-2": a lock it needs .* waited 200 ms for it/),
      });
    } finally {
      await producer.query('ROLLBACK');
      producer.release();
    }
    expect(await rowStatus('kb-2')).toMatchObject({ status: 'queued' });
    expect(await runtime.cancel('kb-2', { lockWaitMs: 200 })).toEqual({
      accepted: true,
      status: 'cancelled',
    });
    await open('kb-1');
    expect((await settled(runtime, 'kb-1')).status).toBe('completed');
  });

  it('refuses a lock key that is not a string of 1-200 characters, or a key function that throws', async () => {
    const keyed = (name: string, lockKey: (input: { account: string }) => string) =>
      defineSaga({ name, version: 1, input: z.object({ account: z.string() }), lockKey }).step(
        'only',
        { ...fast, run: () => 1 },
      );
    const empty = keyed('key_empty', () => '');
    const long = keyed('key_long', () => 'k'.repeat(201));
    const number = keyed('key_number', (input) => Number(input.account) as unknown as string);
    const throws = keyed('key_throws', () => {
      throw new Error('no account');
    });
    const { runtime } = await startSagas(db.pool, [empty, long, number, throws]);
    const refused = async (def: typeof empty, id: string) => {
      const error = await (runtime as SagaRuntime)
        .start(def, { id, input: { account: '7' } })
        .catch((e: unknown) => e);
      expect(await rowStatus(id)).toBeUndefined();
      return error as SagaError;
    };
    expect(await refused(empty, 'k-1')).toMatchObject({
      code: 'invalid_lock_key',
      message:
        'saga "key_empty": lockKey must return a string of 1-200 characters, got a string of 0 characters',
    });
    expect((await refused(long, 'k-2')).message).toContain('got a string of 201 characters');
    expect((await refused(number, 'k-3')).message).toContain('got number');
    expect(await refused(throws, 'k-4')).toMatchObject({
      code: 'invalid_lock_key',
      message: 'saga "key_throws": lockKey threw: no account',
    });
  });

  it('checks lockKey and whenLocked where the saga is defined', () => {
    const base = { name: 'bad_lock', version: 1, input: account };
    expect(() => defineSaga({ ...base, lockKey: 'account' as never })).toThrow(
      new SagaDefinitionError('bad_lock', 'lockKey must be a function of the input, got string'),
    );
    expect(() =>
      defineSaga({ ...base, lockKey: (i) => i.account, whenLocked: 'wait' as never }),
    ).toThrow(`whenLocked must be 'queue' or 'refuse', got "wait"`);
    expect(() => defineSaga({ ...base, whenLocked: 'refuse' })).toThrow(
      'whenLocked needs a lockKey',
    );
    expect(defineSaga({ ...base, lockKey: (i) => i.account }).lock?.whenLocked).toBe('queue');
    expect(defineSaga(base).lock).toBeNull();
  });

  it('leaves a queued saga of a version this runtime does not know for one that does, or for a cancel', async () => {
    const v1 = billing('locked_versions', undefined, 1);
    const v2 = billing('locked_versions', undefined, 2);
    const starter = createSagaRuntime({ pool: db.pool, sagas: [v1, v2], logger: silent });
    try {
      for (const [def, id, account] of [
        [v2, 'v-holder', 'v'],
        [v1, 'v-old', 'v'],
        [v2, 'v-new', 'v'],
        [v2, 'w-holder', 'w'],
        [v1, 'w-old', 'w'],
      ] as const) {
        await starter.start(def, { id, input: { account } });
      }
      const { logger, lines } = captureLogs();
      const { runtime: onlyV2, worker } = await startSagas(db.pool, [v2], { logger });
      await open('v-holder');
      await open('w-holder');
      await settled(onlyV2, 'v-holder');
      await settled(onlyV2, 'w-holder');
      const warned = () =>
        lines
          .filter((l) => l.reason === 'lock_turn_unknown_version')
          .map((l) => l.sagaId)
          .sort();
      expect(warned()).toEqual(['v-old', 'w-old']);
      // Its reconciler finds both keys again on every pass: warned once per saga (then logged at
      // debug). Before, each pass warned both again, every 5 s by default.
      await onlyV2.reconciler.runOnce();
      await onlyV2.reconciler.runOnce();
      expect(warned()).toEqual(['v-old', 'w-old']);
      expect(await rowStatus('v-old')).toMatchObject({ status: 'queued' });
      // An operator cancels it, with no definition of v1 at hand: the next one starts at once.
      expect(await onlyV2.cancel('v-old')).toEqual({ accepted: true, status: 'cancelled' });
      await open('v-new');
      expect((await settled(onlyV2, 'v-new')).status).toBe('completed');
      // A runtime that knows v1 starts the other from its reconciler (workers claim by queue,
      // so the v2-only worker stops first: it would kill a v1 job as of an unknown type).
      await worker.stop();
      const { runtime: knowsV1 } = await startSagas(db.pool, [v1]);
      expect((await knowsV1.reconciler.runOnce()).sagaIds).toEqual(['w-old']);
      await open('w-old');
      expect((await settled(knowsV1, 'w-old')).status).toBe('completed');
    } finally {
      await starter.close();
    }
  });

  it('counts the deadline from the start, queued time included', async () => {
    const { runtime } = await startSagas(db.pool, [queued]);
    await runtime.start(queued, { id: 'd-1', input: { account: 'd' } });
    await runtime.start(queued, { id: 'd-2', input: { account: 'd' }, deadlineMs: 50 });
    await new Promise((resolve) => setTimeout(resolve, 150));
    await open('d-1');
    await settled(runtime, 'd-1');
    const late = await settled(runtime, 'd-2');
    expect(late.status).toBe('compensated');
    expect(late.error).toMatch(/deadline/);
    expect(ran).not.toContain('d-2:debit');
  });

  it('keeps a signal sent to a queued saga for its wait', async () => {
    const waiting = defineSaga({
      name: 'locked_wait',
      version: 1,
      input: account,
      lockKey: (input) => input.account,
    })
      .waitFor('go', { payload: z.object({ n: z.number() }) })
      .step('hold', {
        ...fast,
        run: async (ctx) => {
          await gate(ctx.sagaId);
          return ctx.steps.go.n;
        },
      });
    const { runtime } = await startSagas(db.pool, [waiting]);
    await runtime.start(waiting, { id: 's-1', input: { account: 's' } });
    await runtime.start(waiting, { id: 's-2', input: { account: 's' } });
    expect(await runtime.signal('s-2', 'go', { n: 2 })).toEqual({
      delivered: true,
      resumed: false,
    });
    await settled(runtime, 's-1', ['waiting']);
    expect(await runtime.signal('s-1', 'go', { n: 1 })).toMatchObject({ resumed: true });
    await open('s-1');
    await settled(runtime, 's-1');
    await open('s-2');
    const second = await settled(runtime, 's-2');
    expect(second.status).toBe('completed');
    expect(second.history.find((h) => h.step === 'hold')?.output).toBe(2);
  });

  it('refuses a start with a lock key in a REPEATABLE READ transaction', async () => {
    const { runtime } = await startSagas(db.pool, [queued]);
    const tx = await db.pool.connect();
    try {
      await tx.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      const refusal = await runtime
        .start(queued, { id: 'i-1', input: { account: 'i' }, tx })
        .catch((e: unknown) => e);
      expect(refusal).toMatchObject({
        code: 'lock_key_isolation',
        message:
          'saga "locked_queue" has a lockKey: start, retry and end it in a READ COMMITTED transaction, not REPEATABLE READ',
      });
      await tx.query('ROLLBACK');
    } finally {
      tx.release();
    }
    expect(await rowStatus('i-1')).toBeUndefined();
  });
});
