import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSaga, SagaDefinitionError } from '../src/index.js';
import { nextCompensation } from '../src/plan.js';
import type { PlannedStep } from '../src/plan.js';

const input = z.object({});
const base = () => defineSaga({ name: 'rules', version: 1, input });
const run = () => null;
const compensate = () => {};

describe('step order is checked when the saga is defined', () => {
  it('accepts compensatable, plain, pivot, then retriable steps', () => {
    const saga = base()
      .step('validate', { run })
      .step('reserve', { run, compensate })
      .waitFor('approved', { payload: z.object({}) })
      .step('charge', { run, pivot: true })
      .step('ship', { run, retriable: true });
    expect(saga.steps.map((s) => s.role)).toEqual([
      'plain',
      'compensatable',
      'plain',
      'pivot',
      'retriable',
    ]);
  });

  it.each([
    [
      'a second pivot',
      () => base().step('a', { run, pivot: true }).step('b', { run, pivot: true }),
      /step "b" is a second pivot; "a" already is the pivot/,
    ],
    [
      'compensate after the pivot',
      () => base().step('p', { run, pivot: true }).step('c', { run, compensate }),
      /step "c" has compensate but comes after the pivot "p"/,
    ],
    [
      'compensate after a retriable step',
      () => base().step('r', { run, retriable: true }).step('c', { run, compensate }),
      /step "c" has compensate but comes after retriable step "r"/,
    ],
    [
      'a pivot after a retriable step',
      () => base().step('r', { run, retriable: true }).step('p', { run, pivot: true }),
      /pivot "p" comes after retriable step "r"/,
    ],
    [
      'a plain step after the pivot',
      () => base().step('p', { run, pivot: true }).step('x', { run }),
      /step "x" comes after the pivot "p"; mark it `retriable: true`/,
    ],
    [
      'a plain step after a wait after the pivot',
      () =>
        base()
          .step('p', { run, pivot: true })
          .waitFor('w', { payload: z.object({}), timeoutMs: 5 })
          .step('x', { run }),
      /step "x" comes after the pivot "p"; mark it `retriable: true`/,
    ],
    [
      'a pivot with compensate',
      () => base().step('p', { run, pivot: true, compensate }),
      /step "p" is the pivot and has compensate/,
    ],
    [
      'a retriable step with compensate',
      () => base().step('r', { run, retriable: true, compensate }),
      /step "r" is retriable and has compensate/,
    ],
    [
      'a duplicate step name',
      () =>
        base()
          .step('a', { run })
          .step('b', { run })
          .step('a' as 'c', { run }),
      /step "a" is defined twice/,
    ],
    [
      'a bad step name',
      () => base().step('no spaces', { run }),
      /step name "no spaces" must be 1-48 letters/,
    ],
    [
      'a signal awaited twice',
      () =>
        base()
          .waitFor('w1', { signal: 's', payload: z.object({}) })
          .waitFor('w2', { signal: 's', payload: z.object({}) }),
      /signal "s" is already awaited by step "w1"/,
    ],
    [
      'a bad retry policy',
      () => base().step('a', { run, maxAttempts: 0 }),
      /step "a": maxAttempts: Too small/,
    ],
  ])('rejects %s', (_what, define, message) => {
    expect(define).toThrow(SagaDefinitionError);
    expect(define).toThrow(message);
  });

  it('rejects a bad name, version or input schema', () => {
    expect(() => defineSaga({ name: 'a b', version: 1, input })).toThrow(/name must be/);
    expect(() => defineSaga({ name: 'a', version: 0, input })).toThrow(/version must be/);
    expect(() => defineSaga({ name: 'a', version: 1, input: {} as z.ZodType })).toThrow(
      /input must be a Standard Schema v1 validator .*: it has no `~standard` property/,
    );
  });

  it('rejects input and signal schemas that accept only what JSON cannot carry, naming where', () => {
    expect(() =>
      defineSaga({ name: 'dated', version: 1, input: z.object({ at: z.date() }) }),
    ).toThrow(
      /^saga "dated": input\.at: the schema accepts only a Date, .*z\.coerce\.date\(\).*\(saga inputs are stored as JSON\)$/,
    );
    expect(() => base().waitFor('paid', { payload: z.object({ cents: z.bigint() }) })).toThrow(
      /^saga "rules": wait step "paid": payload\.cents: the schema accepts only a BigInt.*\(signal payloads are stored as JSON\)$/,
    );
    expect(() =>
      defineSaga({ name: 'ok', version: 1, input: z.object({ at: z.coerce.date() }) }).waitFor(
        'paid',
        { payload: z.object({ cents: z.coerce.bigint() }) },
      ),
    ).not.toThrow();
  });

  it('returns a new definition per step and leaves the earlier one unchanged', () => {
    const one = base().step('a', { run });
    const two = one.step('b', { run });
    expect(one.steps.map((s) => s.name)).toEqual(['a']);
    expect(two.steps.map((s) => s.name)).toEqual(['a', 'b']);
    expect(Object.isFrozen(two)).toBe(true);
  });
});

describe('nextCompensation', () => {
  const steps: PlannedStep[] = [
    { name: 'a', role: 'compensatable', waits: false },
    { name: 'read', role: 'plain', waits: false },
    { name: 'b', role: 'compensatable', waits: false },
    { name: 'c', role: 'compensatable', waits: false },
    { name: 'pivot', role: 'pivot', waits: false },
  ];

  it('walks completed compensatable steps backwards from a position', () => {
    const done = new Set(['a', 'read', 'b', 'c']);
    expect(nextCompensation(steps, done, 4)).toEqual({ name: 'c', index: 3 });
    expect(nextCompensation(steps, done, 3)).toEqual({ name: 'b', index: 2 });
    expect(nextCompensation(steps, done, 2)).toEqual({ name: 'a', index: 0 });
    expect(nextCompensation(steps, done, 0)).toBeNull();
  });

  it('skips steps that did not complete and steps with nothing to undo', () => {
    expect(nextCompensation(steps, new Set(['a', 'read']), 5)).toEqual({ name: 'a', index: 0 });
    expect(nextCompensation(steps, new Set(['read']), 5)).toBeNull();
  });
});
