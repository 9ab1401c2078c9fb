/**
 * The saga of the lock-key process test (saga-lock-key.test.ts): one active saga per account.
 * `enter` and `leave` record when the saga held the account (`saga_lock.turns`, written inside
 * `ctx.transaction`, so once per saga whatever the crashes); `work` takes a few milliseconds and,
 * for every seventh saga, fails for good so the saga compensates `enter` (recorded as `undo`).
 */
import { NonRetryableError } from '@skiplock/queue';
import { defineSaga, type StepContext, type StepOutputs } from '../../packages/saga/src/index.js';
import { z } from 'zod';

// `starts` records, by a trigger, the order in which the sagas were inserted: each insert runs
// while its start holds the key's turn lock, so per key this is the order the starts took it,
// known apart from the created_at the runtime orders its queue by.
export const LOCK_SCHEMA_SQL = `
  CREATE SCHEMA IF NOT EXISTS saga_lock;
  CREATE TABLE saga_lock.turns (saga_id text NOT NULL, account text NOT NULL, what text NOT NULL,
                                at timestamptz NOT NULL DEFAULT clock_timestamp());
  CREATE TABLE saga_lock.starts (seq bigserial PRIMARY KEY, saga_id text NOT NULL);
  CREATE FUNCTION saga_lock.record_start() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN INSERT INTO saga_lock.starts (saga_id) VALUES (NEW.id); RETURN NEW; END $$;
  CREATE TRIGGER record_start AFTER INSERT ON skiplock.sagas
    FOR EACH ROW EXECUTE FUNCTION saga_lock.record_start();`;

const retry = { maxAttempts: 25, backoff: { baseMs: 10, maxMs: 50 }, leaseMs: 1_000 } as const;

type Ctx = Pick<StepContext<{ account: string }, StepOutputs>, 'sagaId' | 'input' | 'transaction'>;

async function record(ctx: Ctx, what: string) {
  await ctx.transaction((tx) =>
    tx.query('INSERT INTO saga_lock.turns (saga_id, account, what) VALUES ($1, $2, $3)', [
      ctx.sagaId,
      ctx.input.account,
      what,
    ]),
  );
}

export const lockedSaga = defineSaga({
  name: 'account_lock',
  version: 1,
  input: z.object({ account: z.string(), fail: z.boolean() }),
  lockKey: (input) => input.account,
})
  .step('enter', {
    ...retry,
    run: (ctx) => record(ctx, 'enter'),
    compensate: (ctx) => record(ctx, 'undo'),
  })
  .step('work', {
    ...retry,
    run: async (ctx) => {
      await new Promise((resolve) => setTimeout(resolve, 2 + Math.random() * 10));
      if (ctx.input.fail) throw new NonRetryableError('declined');
    },
  })
  .step('leave', { ...retry, run: (ctx) => record(ctx, 'leave') });
