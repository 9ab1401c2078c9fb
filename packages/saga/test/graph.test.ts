import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSaga, sagaGraph } from '../src/index.js';

const run = () => null;
const compensate = () => {};

describe('sagaGraph', () => {
  it('draws a parallel group as a subgraph of its branches; its failure undoes its branches first', () => {
    const saga = defineSaga({ name: 'checkout', version: 1, input: z.object({}) })
      .step('quote', { run, compensate })
      .parallel('prepare', (branch) => ({
        stock: branch({ run, compensate }),
        card: branch({ run, compensate }),
        fraud: branch({ run }),
      }))
      .step('charge', { run, pivot: true });
    expect(sagaGraph(saga)).toBe(
      [
        'flowchart TD',
        '  start(["start checkout v1"])',
        '  s0["quote"]',
        '  subgraph s1 ["prepare: 3 parallel branches, the last to end moves on"]',
        '    direction LR',
        '    s1b0["stock"]',
        '    s1b1["card"]',
        '    s1b2["fraud"]',
        '  end',
        '  s2{{"charge (pivot)"}}',
        '  done(["completed"])',
        '  c0["undo quote"]',
        // fraud has nothing to undo: it is never reopened.
        '  c1["undo prepare (stock, card at once)"]',
        '  compensated(["compensated"])',
        '  start --> s0 --> s1 --> s2 --> done',
        '  s0 -. fails .-> compensated',
        '  s1 -. fails .-> c1',
        '  s2 -. fails .-> c1',
        '  c0 --> compensated',
        '  c1 --> c0',
        '',
      ].join('\n'),
    );
    // A group with nothing to undo is skipped by compensation, like a plain step.
    const checks = defineSaga({ name: 'checks', version: 1, input: z.object({}) })
      .step('hold', { run, compensate })
      .parallel('verify', (branch) => ({ a: branch({ run }), b: branch({ run }) }));
    expect(sagaGraph(checks)).toContain('  s1 -. fails .-> c0\n');
    expect(sagaGraph(checks)).not.toContain('undo verify');
  });

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
