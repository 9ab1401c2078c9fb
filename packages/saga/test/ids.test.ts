import { createClient, createWorker, defineJob } from '@skiplock/queue';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createSagaRuntime, defineSaga, SagaValidationError } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { captureLogs, fast, settled, silent, startSagas, timeline } from './fixtures.js';

const db = await useTestDatabase();

const keys: Record<string, string[]> = {};
const undone: string[] = [];
const order = defineSaga({ name: 'ids', version: 1, input: z.object({ fail: z.boolean() }) })
  .step('reserve', {
    ...fast,
    run: (ctx) => {
      (keys[ctx.sagaId] ??= []).push(ctx.idempotencyKey);
      return { held: ctx.sagaId };
    },
    compensate: (ctx, output) => {
      (keys[ctx.sagaId] ??= []).push(ctx.idempotencyKey);
      undone.push(output.held);
    },
  })
  .step('charge', {
    ...fast,
    maxAttempts: 1,
    run: (_ctx, input) => {
      if (input.fail) throw new Error('card declined');
      return 1;
    },
  });

describe('saga ids in job keys', () => {
  it("keeps saga K's compensation apart from saga K:compensate's step (collided before)", async () => {
    const { runtime } = await startSagas(db.pool, [order]);
    // Its step `reserve` was keyed saga:K:compensate:reserve, the key of K's compensation below.
    await runtime.start(order, { id: 'K:compensate', input: { fail: false } });
    expect((await settled(runtime, 'K:compensate')).status).toBe('completed');
    await runtime.start(order, { id: 'K', input: { fail: true } });
    const k = await settled(runtime, 'K');
    expect(k.status).toBe('compensated');
    expect(timeline(k)).toEqual(['reserve:completed', 'charge:failed', 'undo reserve:completed']);
    expect(undone).toContain('K');
    expect(keys['K:compensate']).toEqual(['saga:K%3Acompensate:reserve']);
    expect(keys['K']).toEqual(['saga:K:reserve', 'saga:K:compensate:reserve']);
  });

  it('encodes %, : and non-ASCII characters, so every id has keys of its own', async () => {
    const { runtime } = await startSagas(db.pool, [order]);
    const ids = [':', '::', '%', '%3A', 'compensate', 'a:b', 'a%3Ab', '注文-ü-🚀', 'x'.repeat(200)];
    for (const id of ids) await runtime.start(order, { id, input: { fail: true } });
    for (const id of ids) {
      const saga = await settled(runtime, id);
      expect([id, saga.status]).toEqual([id, 'compensated']);
      expect(timeline(saga)).toEqual([
        'reserve:completed',
        'charge:failed',
        'undo reserve:completed',
      ]);
    }
    expect(keys[':']).toEqual(['saga:%3A:reserve', 'saga:%3A:compensate:reserve']);
    expect(keys['%']?.[0]).toBe('saga:%25:reserve');
    expect(keys['%3A']?.[0]).toBe('saga:%253A:reserve');
    expect(keys['compensate']?.[1]).toBe('saga:compensate:compensate:reserve');
    expect(keys['注文-ü-🚀']?.[0]).toBe(
      `saga:${encodeURIComponent('注文')}-%C3%BC-${encodeURIComponent('🚀')}:reserve`,
    );
    expect(keys['x'.repeat(200)]?.[0]).toBe(`saga:${'x'.repeat(200)}:reserve`);
    // Every key of every saga is distinct, and each decodes back to its saga's id.
    const all = Object.entries(keys).flatMap(([id, ks]) => ks.map((k) => [id, k] as const));
    expect(new Set(all.map(([, k]) => k)).size).toBe(all.length);
    for (const [id, key] of all) {
      expect(decodeURIComponent(key.split(':')[1]!)).toBe(id);
      // The documented rule, as examples/billing's chargeKeyOf spells it.
      const encoded = id.replace(/[^\x21-\x24\x26-\x39\x3b-\x7e]/gu, encodeURIComponent);
      expect(key.startsWith(`saga:${encoded}:`)).toBe(true);
    }
  });

  it('refuses an empty id, a 1,000-character id and ids too long once encoded, naming the limit', async () => {
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [order], logger: silent });
    const refused = async (id: string) => {
      const error = await runtime.start(order, { id, input: { fail: false } }).catch((e) => e);
      expect(error).toBeInstanceOf(SagaValidationError);
      expect((error as SagaValidationError).code).toBe('invalid_id');
      return (error as Error).message;
    };
    expect(await refused('')).toMatch(/saga id: id: must not be empty/);
    expect(await refused('y'.repeat(1_000))).toMatch(/at most 200 characters, got 1000/);
    expect(await refused(':'.repeat(200))).toMatch(/at most 400 characters once encoded/);
    expect(await refused('has space')).toMatch(/whitespace or control characters/);
    expect(await refused('nul\u0000')).toMatch(/whitespace or control characters/);
    expect(await refused('\ud800')).toMatch(/whitespace or control characters/);
    for (const dots of ['.', '..']) {
      expect(await refused(dots)).toMatch(/must not be "\." or "\.\.", which no URL path can hold/);
    }
    await expect(async () => runtime.getSaga('')).rejects.toBeInstanceOf(SagaValidationError);
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM skiplock.sagas
      WHERE id = '' OR length(id) >= 1000 OR id LIKE '::::%'`);
    expect(rows[0].n).toBe(0);
    await runtime.close();
  });

  it("fails a saga loudly when its next job's key is held by a job that is not its own", async () => {
    const { logger, lines } = captureLogs();
    // An application job in the saga's queue that took the key of F's compensation.
    const squatter = defineJob({
      type: 'squatter',
      queue: order.queue,
      payload: z.object({}),
      handler: () => {},
    });
    const client = createClient({ pool: db.pool, logger: silent });
    await client.enqueue(squatter, {}, { idempotencyKey: 'saga:F:compensate:reserve' });
    await client.close();
    const { runtime } = await startSagas(db.pool, [order], { logger });
    await runtime.start(order, { id: 'F', input: { fail: true } });
    const f = await settled(runtime, 'F');
    expect(f.status).toBe('failed');
    expect(f.error).toMatch(
      /^idempotency key "saga:F:compensate:reserve" of step "reserve" is held by a "squatter" job \(job \d+\) that is not this saga's$/,
    );
    expect(f.currentJobId).toBeNull();
    expect(lines).toContainEqual(
      expect.objectContaining({ reason: 'foreign_job', sagaId: 'F', step: 'reserve' }),
    );
  });
});

describe('a wait whose timeout job dies', () => {
  it('fails the wait as a timeout would: the saga compensates, with the reason in its history', async () => {
    const released: string[] = [];
    const saga = defineSaga({ name: 'patient', version: 1, input: z.object({}) })
      .step('hold', { ...fast, run: () => 1, compensate: (ctx) => void released.push(ctx.sagaId) })
      .waitFor('answer', { payload: z.object({ ok: z.boolean() }), timeoutMs: 60_000 });
    const { logger, lines } = captureLogs();
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [saga], logger });
    await runtime.reconciler.stop();
    // The worker's own sweeper, which knows the saga's job types (not started: driven by hand).
    const worker = createWorker({
      pool: db.pool,
      jobs: runtime.jobs,
      logger: silent,
      sweeper: {},
      retention: false,
      listen: false,
    });
    await runtime.start(saga, { id: 'w:1', input: {} });
    await waitFor(async () => {
      await worker.runOnce();
      return (await runtime.getSaga('w:1'))?.status === 'waiting';
    });
    // The timeout job's worker died holding its last attempt: the lease ran out.
    const { rows } = await db.pool.query<{ id: string }>(
      `UPDATE skiplock.jobs SET status = 'processing', attempts = max_attempts, locked_by = 'gone',
              locked_at = now(), lease_expires_at = now() - interval '1 second'
        WHERE idempotency_key = 'saga:w%3A1:timeout:answer' RETURNING id::text`,
    );
    expect(rows).toHaveLength(1);
    expect(await worker.sweeper!.runOnce()).toMatchObject({ dead: 1, jobIds: [rows[0]!.id] });
    const swept = (await runtime.getSaga('w:1'))!;
    expect([swept.status, swept.currentStep]).toEqual(['compensating', 'hold']);
    await waitFor(async () => (await worker.runOnce()) === 1);
    const done = (await runtime.getSaga('w:1'))!;
    expect(done.status).toBe('compensated');
    expect(timeline(done)).toEqual(['hold:completed', 'answer:failed', 'undo hold:completed']);
    expect(done.history[1]?.error).toMatch(
      /^timeout job of signal "answer" died \(max_attempts\): lease expired: worker gone/,
    );
    expect(done.error).toMatch(/^step "answer" failed: timeout job of signal "answer" died/);
    expect(released).toEqual(['w:1']);
    expect(lines).toContainEqual(
      expect.objectContaining({ reason: 'timeout_job_dead', sagaId: 'w:1', step: 'answer' }),
    );
    await worker.stop();
    await runtime.close();
  });

  it('fails the wait when its timeout job dies on the worker (a payload gone bad)', async () => {
    const released: string[] = [];
    const saga = defineSaga({ name: 'spoiled', version: 1, input: z.object({}) })
      .step('hold', { ...fast, run: () => 1, compensate: (ctx) => void released.push(ctx.sagaId) })
      .waitFor('answer', { payload: z.object({ ok: z.boolean() }), timeoutMs: 60_000 });
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'ü%', input: {} });
    await settled(runtime, 'ü%', ['waiting']);
    // The job no longer says whose it is, and it is due now: it dies on its first attempt.
    const { rowCount } = await db.pool.query(
      `UPDATE skiplock.jobs SET payload = '{}', run_at = now()
        WHERE idempotency_key = 'saga:%C3%BC%25:timeout:answer' AND status = 'pending'`,
    );
    expect(rowCount).toBe(1);
    const done = await settled(runtime, 'ü%');
    expect(done.status).toBe('compensated');
    expect(timeline(done)).toEqual(['hold:completed', 'answer:failed', 'undo hold:completed']);
    expect(done.history[1]?.error).toMatch(
      /^timeout job of signal "answer" died \(invalid_payload\): /,
    );
    expect(released).toEqual(['ü%']);
  });
});
