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
