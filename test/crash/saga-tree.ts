/**
 * The sagas of the child-saga crash test (saga-children.test.ts): `order_tree` reserves (an
 * external call deduplicated by its idempotency key), runs the child saga `parcel` (pack, label:
 * effects written in `ctx.transaction`), then charges at its pivot (declined for every fifth
 * order, which compensates the child and the reservation) and notifies. Every effect is keyed by
 * the step's idempotency key, so a duplicate would show as a second row.
 */
import { NonRetryableError } from '@skiplock/queue';
import { defineSaga, type StepContext, type StepOutputs } from '../../packages/saga/src/index.js';
import type pg from 'pg';
import { z } from 'zod';

export const TREE_SCHEMA_SQL = `
  CREATE SCHEMA IF NOT EXISTS saga_tree;
  CREATE TABLE saga_tree.external (key text PRIMARY KEY, calls int NOT NULL DEFAULT 1);
  CREATE TABLE saga_tree.effects (key text NOT NULL, at timestamptz NOT NULL DEFAULT now());`;

const retry = { maxAttempts: 25, backoff: { baseMs: 10, maxMs: 50 }, leaseMs: 1_000 } as const;

const pause = () => new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * 20));

type Ctx = Pick<StepContext<unknown, StepOutputs>, 'idempotencyKey' | 'transaction'>;

export function createTreeSagas(pool: pg.Pool) {
  const effect = async (ctx: Ctx) => {
    await pause();
    await ctx.transaction((tx) =>
      tx.query('INSERT INTO saga_tree.effects (key) VALUES ($1)', [ctx.idempotencyKey]),
    );
  };
  const external = async (key: string) => {
    await pause();
    await pool.query(
      `INSERT INTO saga_tree.external (key) VALUES ($1)
       ON CONFLICT (key) DO UPDATE SET calls = saga_tree.external.calls + 1`,
      [key],
    );
  };
  const parcel = defineSaga({ name: 'parcel', version: 1, input: z.object({ n: z.number() }) })
    .step('pack', {
      ...retry,
      compensation: retry,
      run: async (ctx) => (await effect(ctx), { box: ctx.input.n }),
      compensate: (ctx) => effect(ctx),
    })
    .step('label', {
      ...retry,
      compensation: retry,
      run: async (ctx) => (await effect(ctx), { label: `L${ctx.steps.pack.box}` }),
      compensate: (ctx) => effect(ctx),
    });
  const order = defineSaga({
    name: 'order_tree',
    version: 1,
    input: z.object({ n: z.number(), decline: z.boolean() }),
  })
    .step('reserve', {
      ...retry,
      compensation: retry,
      run: (ctx) => external(ctx.idempotencyKey),
      compensate: (ctx) => external(ctx.idempotencyKey),
    })
    .child('ship', parcel, (ctx) => ({ n: ctx.input.n }))
    .step('charge', {
      ...retry,
      pivot: true,
      run: async (ctx) => {
        if (ctx.input.decline) throw new NonRetryableError('declined');
        await effect(ctx);
        return { label: ctx.steps.ship.label.label };
      },
    })
    .step('notify', { ...retry, retriable: true, run: (ctx) => effect(ctx) });
  return { order, parcel };
}
