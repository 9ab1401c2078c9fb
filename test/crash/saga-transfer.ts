/**
 * The saga the saga crash test runs in worker processes it SIGKILLs. Every step records each
 * time its code starts (`saga_crash.runs`, at-least-once evidence) and applies its effect in one
 * of the two exactly-once ways the saga package offers:
 * - `reserve` calls a stand-in external API that deduplicates by the step's idempotency key
 *   (`saga_crash.external`, keyed; `calls` counts how often it was asked);
 * - `debit`, `credit` and `notify` write `saga_crash.effects` (no unique key, so a duplicate
 *   would show) inside `ctx.transaction`, committing with the step's completion.
 * Every fifth saga is declined at `credit` (the pivot) and compensates `debit` and `reserve`.
 */
import { NonRetryableError } from '@skiplock/queue';
import { defineSaga } from '../../packages/saga/src/index.js';
import type pg from 'pg';
import { z } from 'zod';

export const CRASH_SCHEMA_SQL = `
  CREATE SCHEMA IF NOT EXISTS saga_crash;
  CREATE TABLE saga_crash.runs (saga_id text NOT NULL, step text NOT NULL, kind text NOT NULL,
                                pid int NOT NULL, at timestamptz NOT NULL DEFAULT now());
  CREATE TABLE saga_crash.external (key text PRIMARY KEY, calls int NOT NULL DEFAULT 1);
  CREATE TABLE saga_crash.effects (key text NOT NULL, at timestamptz NOT NULL DEFAULT now());`;

const retry = { maxAttempts: 25, backoff: { baseMs: 10, maxMs: 50 }, leaseMs: 1_000 } as const;

const pause = (signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const onAbort = () => (clearTimeout(timer), reject(signal.reason));
    const timer = setTimeout(
      () => (signal.removeEventListener('abort', onAbort), resolve()),
      5 + Math.floor(Math.random() * 25),
    );
    signal.addEventListener('abort', onAbort, { once: true });
  });

export function createTransferSaga(pool: pg.Pool) {
  const ran = (ctx: { sagaId: string; step: string }, kind: string) =>
    pool.query('INSERT INTO saga_crash.runs (saga_id, step, kind, pid) VALUES ($1, $2, $3, $4)', [
      ctx.sagaId,
      ctx.step,
      kind,
      process.pid,
    ]);
  const external = (key: string) =>
    pool.query(
      `INSERT INTO saga_crash.external (key) VALUES ($1)
       ON CONFLICT (key) DO UPDATE SET calls = saga_crash.external.calls + 1`,
      [key],
    );
  const effect = (tx: pg.PoolClient, key: string) =>
    tx.query('INSERT INTO saga_crash.effects (key) VALUES ($1)', [key]);

  return defineSaga({
    name: 'transfer',
    version: 1,
    input: z.object({ n: z.number().int(), decline: z.boolean() }),
  })
    .step('reserve', {
      ...retry,
      run: async (ctx) => {
        await ran(ctx, 'step');
        await pause(ctx.signal);
        await external(ctx.idempotencyKey);
        return { reserved: ctx.input.n };
      },
      compensate: async (ctx) => {
        await ran(ctx, 'compensation');
        await pause(ctx.signal);
        await external(ctx.idempotencyKey);
      },
      compensation: retry,
    })
    .step('debit', {
      ...retry,
      run: async (ctx) => {
        await ran(ctx, 'step');
        await pause(ctx.signal);
        await ctx.transaction((tx) => effect(tx, ctx.idempotencyKey));
        return { debited: ctx.steps.reserve.reserved };
      },
      compensate: async (ctx) => {
        await ran(ctx, 'compensation');
        await pause(ctx.signal);
        await ctx.transaction((tx) => effect(tx, ctx.idempotencyKey));
      },
      compensation: retry,
    })
    .step('credit', {
      ...retry,
      pivot: true,
      run: async (ctx) => {
        await ran(ctx, 'step');
        await pause(ctx.signal);
        if (ctx.input.decline) throw new NonRetryableError('credit declined');
        await ctx.transaction((tx) => effect(tx, ctx.idempotencyKey));
        return { credited: ctx.steps.debit.debited };
      },
    })
    .step('notify', {
      ...retry,
      retriable: true,
      run: async (ctx) => {
        await ran(ctx, 'step');
        await pause(ctx.signal);
        await ctx.transaction((tx) => effect(tx, ctx.idempotencyKey));
        return { notified: true };
      },
    });
}
