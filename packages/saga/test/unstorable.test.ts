import { createWorker } from '@skiplock/queue';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createSagaRuntime, defineSaga } from '../src/index.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { fast, settled, silent, startSagas, timeline } from './fixtures.js';

// What a step hands back that PostgreSQL cannot store (found in an audit).

const db = await useTestDatabase();
const effects: string[] = [];

const nul = defineSaga({ name: 'nul', version: 1, input: z.object({ what: z.string() }) })
  .step('reserve', {
    ...fast,
    run: (ctx) => void effects.push(`${ctx.sagaId}:reserve`),
    compensate: (ctx) => void effects.push(`${ctx.sagaId}:release`),
  })
  .step('charge', {
    ...fast,
    maxAttempts: 2,
    leaseMs: 1_000,
    run: (ctx) => {
      effects.push(`${ctx.sagaId}:charge`);
      if (ctx.input.what === 'error') throw new Error('upstream said: card\u0000declined');
      if (ctx.input.what === 'bigint') return { cents: 10n };
      return { note: 'ok\u0000' };
    },
  });

describe('values a step hands back that PostgreSQL cannot store', () => {
  it('an error message with a NUL fails the attempt at its backoff, its text kept', async () => {
    const logs = captureLogs();
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [nul], logger: silent });
    const worker = createWorker({
      pool: db.pool,
      jobs: runtime.jobs,
      logger: logs.logger,
      pollIntervalMs: 20,
      sweeper: { intervalMs: 100 },
      retention: false,
    });
    await worker.start();
    try {
      await runtime.start(nul, { id: 'e1', input: { what: 'error' } });
      const saga = await settled(runtime, 'e1');
      expect(timeline(saga)).toEqual([
        'reserve:completed',
        'charge:failed',
        'undo reserve:completed',
      ]);
      // Before: every write of the failure failed (invalid byte sequence 0x00), the job waited
      // for its lease to run out, and the saga failed with "lease expired" as its error.
      expect(saga.error).toContain('upstream said: card\ufffddeclined');
      expect(effects.filter((x) => x === 'e1:charge')).toHaveLength(2);
      const reasons = logs.reasons();
      expect(reasons).not.toContain('db_error');
      expect(reasons).not.toContain('lease_expired');
    } finally {
      await worker.stop();
      await runtime.close();
    }
  });

  it('an output with a NUL or a BigInt fails the step for good at once, naming the output', async () => {
    const { runtime } = await startSagas(db.pool, [nul]);
    for (const [id, what, message] of [
      ['o1', 'output', /output\.note contains a NUL character/],
      ['o2', 'bigint', /output JSON cannot hold: .*BigInt/],
    ] as const) {
      await runtime.start(nul, { id, input: { what } });
      const saga = await settled(runtime, id);
      expect(saga.status).toBe('compensated');
      expect(saga.error).toMatch(message);
      // Before: each retry charged again, to fail the same way in the completion.
      expect(effects.filter((x) => x === `${id}:charge`)).toHaveLength(1);
    }
  });
});
