import type { StandardSchemaV1 } from '@standard-schema/spec';
import { describe, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import {
  defineSaga,
  createSagaRuntime,
  type SagaInput,
  type SagaOutputs,
  type StepContext,
} from '../src/index.js';

const input = z.object({ orderId: z.string(), cents: z.number().int() });

describe('defineSaga type inference', () => {
  it('gives each step the saga input and the outputs of the steps before it', () => {
    defineSaga({ name: 'typed', version: 1, input })
      .step('reserve', {
        run: (ctx, raw) => {
          expectTypeOf(raw).toEqualTypeOf<{ orderId: string; cents: number }>();
          expectTypeOf(ctx.input).toEqualTypeOf<{ orderId: string; cents: number }>();
          expectTypeOf(ctx.steps).toEqualTypeOf<Readonly<Record<never, never>>>();
          return { reservationId: 'r1', held: 3 };
        },
        compensate: (ctx, output) => {
          expectTypeOf(output).toEqualTypeOf<{ reservationId: string; held: number }>();
          expectTypeOf(ctx.reason).toEqualTypeOf<string>();
        },
      })
      .step('charge', {
        run: async (ctx) => {
          expectTypeOf(ctx.steps.reserve).toEqualTypeOf<{ reservationId: string; held: number }>();
          return { chargeId: 7 };
        },
        compensate: async (ctx, output) => {
          // A compensation sees its own (awaited) output and the steps before it.
          expectTypeOf(output).toEqualTypeOf<{ chargeId: number }>();
          expectTypeOf(ctx.steps.reserve.reservationId).toEqualTypeOf<string>();
          // @ts-expect-error a compensation of `charge` cannot read steps after it
          void ctx.steps.ship;
        },
      })
      .waitFor('confirmed', { payload: z.object({ ok: z.boolean() }), timeoutMs: 1_000 })
      .step('ship', {
        pivot: true,
        run: (ctx) => {
          expectTypeOf(ctx.steps.charge.chargeId).toEqualTypeOf<number>();
          expectTypeOf(ctx.steps.confirmed).toEqualTypeOf<{ ok: boolean }>();
          return ctx.steps.reserve.held > 0;
        },
      });
  });

  it('rejects reading a step that has not run yet', () => {
    defineSaga({ name: 'early', version: 1, input }).step('first', {
      run: (ctx) => {
        // @ts-expect-error `second` is defined after `first`, so first cannot read it
        return ctx.steps.second;
      },
    });
    defineSaga({ name: 'self', version: 1, input }).step('only', {
      run: (ctx) => {
        // @ts-expect-error a step cannot read its own output
        return ctx.steps.only;
      },
    });
  });

  it('rejects a step name used twice', () => {
    defineSaga({ name: 'twice', version: 1, input })
      .step('a', { run: () => 1 })
      // @ts-expect-error step names are unique
      .step('a', { run: () => 2 });
  });

  it('types compensate from run, and refuses a mismatched compensate', () => {
    defineSaga({ name: 'comp', version: 1, input }).step('x', {
      run: () => ({ n: 1 }),
      // @ts-expect-error the output has no `m`
      compensate: (_ctx, output) => output.m,
    });
  });

  it('exposes input and outputs of a definition, and checks start input', () => {
    const saga = defineSaga({ name: 'io', version: 1, input })
      .step('a', { run: () => ({ a: 'x' }) })
      .step('b', { run: (ctx) => ctx.steps.a.a.length });
    expectTypeOf<SagaInput<typeof saga>>().toEqualTypeOf<{ orderId: string; cents: number }>();
    expectTypeOf<SagaOutputs<typeof saga>>().toEqualTypeOf<{ a: { a: string }; b: number }>();
    expectTypeOf<StepContext<string, { a: number }>['steps']>().toEqualTypeOf<
      Readonly<{ a: number }>
    >();
    const runtime = createSagaRuntime({ sagas: [saga], connectionString: 'postgres://x/y' });
    void runtime.start(saga, { id: 's', input: { orderId: 'o', cents: 1 } });
    // @ts-expect-error input must match the saga's schema
    void runtime.start(saga, { id: 's', input: { orderId: 1 } });
  });
});

/** Hand-written Standard Schemas, no zod: the input's cents come in as digits, out as a number. */
const orderInput: StandardSchemaV1<
  { orderId: string; cents: string },
  { orderId: string; cents: number }
> = {
  '~standard': {
    version: 1,
    vendor: 'hand-written',
    validate: (value) => ({ value: value as { orderId: string; cents: number } }),
  },
};
const answer: StandardSchemaV1<{ ok: 'yes' | 'no' }, { ok: boolean }> = {
  '~standard': {
    version: 1,
    vendor: 'hand-written',
    validate: (value) => ({ value: { ok: (value as { ok: string }).ok === 'yes' } }),
  },
};

describe('defineSaga with a non-zod Standard Schema', () => {
  it('types steps from its output, start from its input, and wait outputs from theirs', () => {
    const saga = defineSaga({ name: 'std', version: 1, input: orderInput })
      .step('reserve', {
        run: (ctx, raw) => {
          expectTypeOf(raw).toEqualTypeOf<{ orderId: string; cents: number }>();
          expectTypeOf(ctx.input.cents).toEqualTypeOf<number>();
          return { held: raw.cents };
        },
      })
      .waitFor('answered', { payload: answer })
      .step('after', {
        run: (ctx) => {
          expectTypeOf(ctx.steps.answered).toEqualTypeOf<{ ok: boolean }>();
          expectTypeOf(ctx.steps.reserve.held).toEqualTypeOf<number>();
        },
      });
    expectTypeOf<SagaInput<typeof saga>>().toEqualTypeOf<{ orderId: string; cents: string }>();
    expectTypeOf<SagaOutputs<typeof saga>>().toEqualTypeOf<{
      reserve: { held: number };
      answered: { ok: boolean };
      after: void;
    }>();
    const runtime = createSagaRuntime({ sagas: [saga], connectionString: 'postgres://x/y' });
    void runtime.start(saga, { id: 's', input: { orderId: 'o', cents: '12' } });
    // @ts-expect-error start takes the schema's input: cents is digits, not a number
    void runtime.start(saga, { id: 's', input: { orderId: 'o', cents: 12 } });
  });

  it('infers a zod schema seen only through `~standard` (another copy of zod) like zod itself', () => {
    const zodInput = z.object({ n: z.string().transform(Number) });
    const saga = defineSaga({
      name: 'foreign',
      version: 1,
      input: { '~standard': zodInput['~standard'] },
    }).step('a', {
      run: (_ctx, raw) => {
        expectTypeOf(raw).toEqualTypeOf<{ n: number }>();
        return raw.n;
      },
    });
    expectTypeOf<SagaInput<typeof saga>>().toEqualTypeOf<{ n: string }>();
    const runtime = createSagaRuntime({ sagas: [saga], connectionString: 'postgres://x/y' });
    // @ts-expect-error start takes the input (a string), not the output (a number)
    void runtime.start(saga, { id: 's', input: { n: 1 } });
  });

  it('refuses an input or wait payload that is not a Standard Schema', () => {
    // @ts-expect-error a plain object is not a schema
    defineSaga({ name: 'bad', version: 1, input: { parse: () => 1 } });
    // @ts-expect-error nor is it as a wait payload
    defineSaga({ name: 'bad', version: 1, input }).waitFor('w', { payload: { parse: () => 1 } });
  });
  it('types a sleep: its wake-time function sees the input and earlier outputs; its output is null', () => {
    const saga = defineSaga({ name: 'nap', version: 1, input: z.object({ days: z.number() }) })
      .step('plan', { run: () => ({ at: 1 }) })
      .sleep('wait', (ctx) => {
        expectTypeOf(ctx.input).toEqualTypeOf<{ days: number }>();
        expectTypeOf(ctx.steps.plan).toEqualTypeOf<{ at: number }>();
        // @ts-expect-error a step after the sleep is not there yet
        void ctx.steps.after;
        return new Date(ctx.steps.plan.at + ctx.input.days * 86_400_000);
      })
      .sleep('short', 1_000)
      .step('after', {
        run: (ctx) => {
          expectTypeOf(ctx.steps.wait).toEqualTypeOf<null>();
          expectTypeOf(ctx.steps.short).toEqualTypeOf<null>();
          return 1;
        },
      });
    expectTypeOf<SagaOutputs<typeof saga>['wait']>().toEqualTypeOf<null>();
    // @ts-expect-error a sleep's function returns the Date to wake, not a number of ms
    defineSaga({ name: 'bad', version: 1, input }).sleep('s', () => 5);
    // @ts-expect-error a step name is used once
    saga.sleep('plan', 1);
  });

  it('types lockKey with the parsed input and whenLocked with its two modes', () => {
    const input = z.object({ account: z.string(), cents: z.coerce.number() });
    defineSaga({
      name: 'locked',
      version: 1,
      input,
      lockKey: (parsed) => {
        expectTypeOf(parsed).toEqualTypeOf<{ account: string; cents: number }>();
        return parsed.account;
      },
      whenLocked: 'refuse',
    });
    // @ts-expect-error a lock key is a string
    defineSaga({ name: 'bad', version: 1, input, lockKey: (parsed) => parsed.cents });
    // @ts-expect-error whenLocked is 'queue' or 'refuse'
    defineSaga({ name: 'bad', version: 1, input, lockKey: (p) => p.account, whenLocked: 'wait' });
  });

  it('types a child step: its input function and its output, the child outputs', () => {
    const child = defineSaga({ name: 'kid', version: 1, input: z.object({ n: z.number() }) })
      .step('a', { run: () => ({ x: 1 }) })
      .step('b', { run: () => 'done' as const });
    defineSaga({ name: 'mom', version: 1, input: z.object({ m: z.number() }) })
      .step('first', { run: () => ({ k: 2 }) })
      .child('kid', child, (ctx) => {
        expectTypeOf(ctx.input).toEqualTypeOf<{ m: number }>();
        expectTypeOf(ctx.steps.first).toEqualTypeOf<{ k: number }>();
        return { n: ctx.input.m + ctx.steps.first.k };
      })
      .step('after', {
        run: (ctx) => {
          expectTypeOf(ctx.steps.kid).toEqualTypeOf<{ a: { x: number }; b: 'done' }>();
          return 1;
        },
      });
    const wrong = () => ({ n: 'x' });
    const mom = defineSaga({ name: 'mom2', version: 1, input: z.object({}) });
    // @ts-expect-error the input function must give the child's input
    mom.child('kid', child, wrong);
  });

  it('types parallel branches: each context, each compensation output, the outputs by branch', () => {
    const saga = defineSaga({ name: 'fan', version: 1, input: z.object({ sku: z.string() }) })
      .step('quote', { run: () => ({ total: 3 }) })
      .parallel('prepare', (branch) => ({
        stock: branch({
          run: async (ctx, input) => {
            expectTypeOf(input).toEqualTypeOf<{ sku: string }>();
            expectTypeOf(ctx.steps.quote).toEqualTypeOf<{ total: number }>();
            return { reservation: ctx.input.sku };
          },
          compensate: (_ctx, output) => {
            expectTypeOf(output).toEqualTypeOf<{ reservation: string }>();
          },
        }),
        card: branch({ run: (ctx) => ctx.steps.quote.total * 100, maxAttempts: 3 }),
      }))
      .step('after', {
        run: (ctx) => {
          expectTypeOf(ctx.steps.prepare).toEqualTypeOf<{
            stock: { reservation: string };
            card: number;
          }>();
          return null;
        },
      });
    expectTypeOf<SagaOutputs<typeof saga>>().toEqualTypeOf<{
      quote: { total: number };
      prepare: { stock: { reservation: string }; card: number };
      after: null;
    }>();
    saga.parallel('more', (branch) => ({
      // @ts-expect-error a branch is never the pivot
      a: branch({ run: () => 1, pivot: true }),
      b: branch({ run: () => 2 }),
    }));
    // @ts-expect-error a step name is used once
    saga.parallel('prepare', (branch) => ({ a: branch({ run: () => 1 }) }));
  });
});
