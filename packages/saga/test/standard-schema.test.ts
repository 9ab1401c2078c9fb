import type { StandardSchemaV1 } from '@standard-schema/spec';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSaga, SagaDefinitionError, SagaValidationError } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { fast, settled, startSagas, timeline } from './fixtures.js';

const db = await useTestDatabase();

/**
 * A hand-written Standard Schema, no library: `cents` comes in as digits and goes out a number.
 * Its validation is async, as a schema that looks something up might be.
 */
const orderInput: StandardSchemaV1<
  { orderId: string; cents: string },
  { orderId: string; cents: number }
> = {
  '~standard': {
    version: 1,
    vendor: 'hand-written',
    validate: async (value) => {
      await new Promise((resolve) => setTimeout(resolve, 1));
      const { orderId, cents } = (value ?? {}) as Record<string, unknown>;
      const issues: StandardSchemaV1.Issue[] = [];
      if (typeof orderId !== 'string')
        issues.push({ message: 'expected a string', path: ['orderId'] });
      if (typeof cents !== 'string' || !/^[0-9]+$/.test(cents)) {
        issues.push({ message: 'expected digits', path: [{ key: 'cents' }] });
      }
      if (issues.length > 0) return { issues };
      return { value: { orderId: orderId as string, cents: Number(cents) } };
    },
  },
};

/** A synchronous hand-written schema for a signal: trims the approver's name. */
const approvalSignal: StandardSchemaV1<{ by: string }, { by: string; trimmed: true }> = {
  '~standard': {
    version: 1,
    vendor: 'hand-written',
    validate: (value) => {
      const by = (value as { by?: unknown } | null)?.by;
      if (typeof by !== 'string' || by.trim() === '') {
        return { issues: [{ message: 'expected a name', path: ['by'] }] };
      }
      return { value: { by: by.trim(), trimmed: true } };
    },
  },
};

const seen: unknown[] = [];
const order = defineSaga({ name: 'std-order', version: 1, input: orderInput })
  .step('reserve', {
    ...fast,
    run: (ctx, input) => {
      seen.push({ input, ctxInput: ctx.input });
      return { reserved: input.cents * 2 };
    },
  })
  .waitFor('approved', { signal: 'approval', payload: approvalSignal, timeoutMs: 30_000 })
  .step('charge', {
    ...fast,
    run: (ctx) => ({
      charged: ctx.steps.reserve.reserved,
      by: ctx.steps.approved.by,
      centsIsNumber: typeof ctx.input.cents === 'number',
    }),
  });

describe('a saga whose schemas are not zod (Standard Schema)', () => {
  it('refuses a bad input on start, naming each field, and starts nothing', async () => {
    const { runtime } = await startSagas(db.pool, [order]);
    const error = await runtime
      .start(order, { id: 'std-bad', input: { orderId: 7 as unknown as string, cents: '1.5' } })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SagaValidationError);
    expect((error as SagaValidationError).code).toBe('invalid_input');
    expect((error as Error).message).toBe(
      'invalid input of saga "std-order": input.orderId: expected a string; input.cents: expected digits',
    );
    expect(await runtime.getSaga('std-bad')).toBeNull();
  });

  it('starts, hands steps the parsed input, validates the signal and runs to the end', async () => {
    const { runtime } = await startSagas(db.pool, [order]);
    expect(
      await runtime.start(order, { id: 'std-ok', input: { orderId: 'o1', cents: '250' } }),
    ).toMatchObject({ id: 'std-ok', started: true });
    await settled(runtime, 'std-ok', ['waiting']);

    const refused = await runtime
      .signal('std-ok', 'approval', { by: '  ' })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(SagaValidationError);
    expect((refused as Error).message).toBe(
      'invalid signal "approval": payload.by: expected a name',
    );

    expect(await runtime.signal('std-ok', 'approval', { by: ' ann ' })).toEqual({
      delivered: true,
      resumed: true,
    });
    const done = await settled(runtime, 'std-ok');
    expect(done.status).toBe('completed');
    expect(timeline(done)).toEqual(['reserve:completed', 'approved:completed', 'charge:completed']);
    expect(done.history.find((h) => h.step === 'approved')?.output).toEqual({
      by: 'ann',
      trimmed: true,
    });
    expect(done.history.at(-1)?.output).toEqual({ charged: 500, by: 'ann', centsIsNumber: true });
    // The stored input is the caller's; every step parses it again.
    expect(done.input).toEqual({ orderId: 'o1', cents: '250' });
    expect(seen).toContainEqual({
      input: { orderId: 'o1', cents: 250 },
      ctxInput: { orderId: 'o1', cents: 250 },
    });
  });

  it('accepts zod schemas from another copy of zod (fail instanceof, have `~standard`)', async () => {
    const zodInput = z.object({ n: z.string().transform(Number) });
    const zodSignal = z.object({ ok: z.boolean() });
    const foreignInput = { '~standard': zodInput['~standard'] };
    const foreignSignal = { '~standard': zodSignal['~standard'] };
    expect(foreignInput instanceof z.ZodType).toBe(false);
    const foreign = defineSaga({ name: 'std-foreign', version: 1, input: foreignInput })
      .step('double', { ...fast, run: (_ctx, input) => input.n * 2 })
      .waitFor('answer', { payload: foreignSignal })
      .step('after', { ...fast, run: (ctx) => ({ ok: ctx.steps.answer.ok, n: ctx.steps.double }) });

    const { runtime } = await startSagas(db.pool, [foreign]);
    await expect(
      runtime.start(foreign, { id: 'f-bad', input: { n: 1 as unknown as string } }),
    ).rejects.toThrow(/invalid input of saga "std-foreign": input\.n: .*string/);
    await runtime.start(foreign, { id: 'f-ok', input: { n: '21' } });
    await settled(runtime, 'f-ok', ['waiting']);
    await expect(
      runtime.signal('f-ok', 'answer', { ok: 'yes' as unknown as boolean }),
    ).rejects.toThrow(/invalid signal "answer": payload\.ok: .*boolean/);
    await runtime.signal('f-ok', 'answer', { ok: true });
    const done = await settled(runtime, 'f-ok');
    expect(done.status).toBe('completed');
    expect(done.history.at(-1)?.output).toEqual({ ok: true, n: 42 });
  });
});

describe('defineSaga and waitFor refuse a schema that is not a Standard Schema', () => {
  it('names the option and what is wrong with it', () => {
    const notSchema = { parse: () => ({}) } as unknown as StandardSchemaV1;
    expect(() => defineSaga({ name: 'bad-input', version: 1, input: notSchema })).toThrow(
      SagaDefinitionError,
    );
    expect(() => defineSaga({ name: 'bad-input', version: 1, input: notSchema })).toThrow(
      'saga "bad-input": input must be a Standard Schema v1 validator (a zod 4, valibot or ' +
        'arktype schema, or any object with a `~standard` property): it has no `~standard` property',
    );
    const wrongVersion = {
      '~standard': { version: 0, vendor: 'x', validate: () => ({ value: null }) },
    } as unknown as StandardSchemaV1;
    const base = defineSaga({ name: 'bad-wait', version: 1, input: z.object({}) });
    expect(() => base.waitFor('w', { payload: wrongVersion })).toThrow(
      'saga "bad-wait": wait step "w": payload must be a Standard Schema v1 validator (a zod 4, ' +
        'valibot or arktype schema, or any object with a `~standard` property): its ' +
        '`~standard.version` is 0, not 1',
    );
  });
});
