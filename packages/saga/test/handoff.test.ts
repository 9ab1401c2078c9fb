import { createWorker } from '@skiplock/queue';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createSagaRuntime, defineSaga } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { fast, settled, silent, timeline } from './fixtures.js';
import { metricValue } from '../../../test/support/metrics.js';

const db = await useTestDatabase();

describe('saga advance by hand-off', () => {
  it('runs every later step on the worker that finished the step before, with no claim of its own', async () => {
    const saga = defineSaga({ name: 'relay', version: 1, input: z.object({ fail: z.boolean() }) })
      .step('a', { ...fast, run: () => 1, compensate: () => {} })
      .step('b', { ...fast, run: () => 2, compensate: () => {} })
      .step('c', {
        ...fast,
        maxAttempts: 1,
        run: (ctx) => {
          if (ctx.input.fail) throw new Error('c failed');
          return 3;
        },
      });
    const runtime = createSagaRuntime({ pool: db.pool, sagas: [saga], logger: silent });
    // Polls once a minute: only LISTEN (for the first step) and hand-offs can move a saga sooner.
    const worker = createWorker({
      pool: db.pool,
      jobs: runtime.jobs,
      logger: silent,
      pollIntervalMs: 60_000,
      sweeper: false,
      retention: false,
    });
    await worker.start();
    await runtime.start(saga, { id: 'ok', input: { fail: false } });
    const ok = await settled(runtime, 'ok');
    await runtime.start(saga, { id: 'undo', input: { fail: true } });
    const undone = await settled(runtime, 'undo');
    await worker.stop();
    await runtime.close();
    expect(ok.status).toBe('completed');
    expect(undone.status).toBe('compensated');
    expect(timeline(undone)).toEqual([
      'a:completed',
      'b:completed',
      'c:failed',
      'undo b:completed',
      'undo a:completed',
    ]);
    // Claimed: the first step of each saga. Handed off: b and c of both sagas, undo's first
    // compensation (enqueued by c's dead-job hook on the worker that ran c), and the compensation
    // of a, which the compensation of b enqueues as it completes.
    expect(await metricValue(worker.metrics, 'skiplock_claim_batch_size_sum')).toBe(2);
    expect(await metricValue(worker.metrics, 'skiplock_jobs_handed_off_total')).toBe(6);
    const { rows } = await db.pool.query<{ locked_by: string }>(
      'SELECT DISTINCT locked_by FROM skiplock.jobs',
    );
    expect(rows).toEqual([{ locked_by: worker.id }]);
  });
});
