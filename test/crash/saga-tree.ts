/**
 * The sagas of the saga-shapes crash test (saga-shapes.test.ts): `order_tree` reserves (an
 * external call deduplicated by its idempotency key), runs the parallel group `prepare` (branches
 * `stock` and `card` with compensations, `audit` without; `card` refuses for good when the input
 * says `refuse`, which undoes `stock` and the reservation), runs the child saga `parcel` (pack,
 * label), then charges at its pivot (declined when the input says `decline`, which compensates the
 * child, the group's branches and the reservation) and notifies. Effects are written in
 * `ctx.transaction`, each keyed by the step's idempotency key, so a duplicate would show as a
 * second row.
 */
import { NonRetryableError } from '@skiplock/queue';
import {
  defineSaga,
  type SagaRuntime,
  type StepContext,
  type StepOutputs,
} from '../../packages/saga/src/index.js';
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
    input: z.object({ n: z.number(), decline: z.boolean(), refuse: z.boolean().optional() }),
  })
    .step('reserve', {
      ...retry,
      compensation: retry,
      run: (ctx) => external(ctx.idempotencyKey),
      compensate: (ctx) => external(ctx.idempotencyKey),
    })
    .parallel('prepare', (branch) => ({
      stock: branch({
        ...retry,
        compensation: retry,
        run: (ctx) => effect(ctx),
        compensate: (ctx) => effect(ctx),
      }),
      card: branch({
        ...retry,
        compensation: retry,
        run: async (ctx) => {
          if (ctx.input.refuse) throw new NonRetryableError('card refused');
          await effect(ctx);
        },
        compensate: (ctx) => effect(ctx),
      }),
      audit: branch({ ...retry, run: (ctx) => effect(ctx) }),
    }))
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

/**
 * The inputs of `count` orders and what they imply: a branch refuses for every seventh order
 * (before the charge is reached); every fifth of the others is declined at the pivot. `start`
 * starts them `batch` at a time; `rows` is the sagas (parents, branches, children) they end as;
 * `effects` the effect rows they write once each (completed: stock, card, audit, pack, label,
 * charge, notify; declined: stock, card, audit, pack, label and the undoing of all but audit;
 * refused: stock, audit and stock's undoing).
 */
type TreeSagas = ReturnType<typeof createTreeSagas>;

export function treeWorkload(count: number) {
  const refuse = (n: number) => n % 7 === 3;
  const decline = (n: number) => !refuse(n) && n % 5 === 0;
  const orders = Array.from({ length: count }, (_, n) => n);
  const refused = orders.filter(refuse).length;
  const declined = orders.filter(decline).length;
  const completed = count - refused - declined;
  return {
    refuse,
    decline,
    refused,
    declined,
    rows: orders.reduce((sum, n) => sum + (refuse(n) ? 4 : 5), 0),
    effects: completed * 7 + declined * 9 + refused * 3,
    async start(runtime: SagaRuntime, order: TreeSagas['order'], batch: number) {
      for (let n = 0; n < count; n += batch) {
        await Promise.all(
          Array.from({ length: Math.min(batch, count - n) }, (_, i) =>
            runtime.start(order, {
              id: `o-${n + i}`,
              input: { n: n + i, decline: decline(n + i), refuse: refuse(n + i) },
            }),
          ),
        );
      }
    },
  };
}
