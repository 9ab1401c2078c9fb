import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSaga, sagaGraph } from '../src/index.js';

const run = () => null;
const compensate = () => {};

describe('sagaGraph', () => {
  it('draws steps in order, waits, the pivot, and where each failure leads', () => {
    const saga = defineSaga({ name: 'order', version: 3, input: z.object({}) })
      .step('validate', { run })
      .step('reserve', { run, compensate })
      .step('authorize', { run, compensate })
      .waitFor('approved', { signal: 'approve', payload: z.object({}), timeoutMs: 90_000 })
      .step('capture', { run, pivot: true })
      .step('ship', { run, retriable: true });
    expect(sagaGraph(saga)).toBe(
      [
        'flowchart TD',
        '  start(["start order v3"])',
        '  s0["validate"]',
        '  s1["reserve"]',
        '  s2["authorize"]',
        '  s3[/"approved: wait for signal approve, timeout 90 s"/]',
        '  s4{{"capture (pivot)"}}',
        '  s5["ship (retried until done)"]',
        '  done(["completed"])',
        '  c1["undo reserve"]',
        '  c2["undo authorize"]',
        '  compensated(["compensated"])',
        '  start --> s0 --> s1 --> s2 --> s3 --> s4 --> s5 --> done',
        // Nothing before the first step to undo; each later failure undoes in reverse.
        '  s0 -. fails .-> compensated',
        '  s1 -. fails .-> compensated',
        '  s2 -. fails .-> c1',
        '  s3 -. fails or times out .-> c2',
        '  s4 -. fails .-> c2',
        '  c1 --> compensated',
        '  c2 --> c1',
        '',
      ].join('\n'),
    );
  });

  it('notes a lock key on the start: one active saga per key, later starts queued or refused', () => {
    const input = z.object({ account: z.string() });
    const lockKey = (i: { account: string }) => i.account;
    const queued = defineSaga({ name: 'pay', version: 1, input, lockKey }).step('a', { run });
    const refused = defineSaga({
      name: 'pay',
      version: 2,
      input,
      lockKey,
      whenLocked: 'refuse',
    }).step('a', { run });
    expect(sagaGraph(queued)).toContain(
      '  start(["start pay v1, one active per lock key (later starts queue)"])',
    );
    expect(sagaGraph(refused)).toContain(
      '  start(["start pay v2, one active per lock key (later starts are refused)"])',
    );
  });

  it('says where a wait after the pivot leads when it times out: failed, not compensated', () => {
    const saga = defineSaga({ name: 'ship', version: 1, input: z.object({}) })
      .step('charge', { run, pivot: true })
      .waitFor('delivered', { payload: z.object({}), timeoutMs: 3_600_000 });
    const lines = sagaGraph(saga).split('\n');
    expect(lines).toContain(
      '  s1[/"delivered: wait for signal delivered, timeout 1 h (then failed)"/]',
    );
    expect(lines.filter((l) => l.includes('-.'))).toEqual(['  s0 -. fails .-> compensated']);
  });
});
