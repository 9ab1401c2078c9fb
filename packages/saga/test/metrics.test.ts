import { createWorker, NonRetryableError, serveMetrics } from '@skiplock/queue';
import { Registry } from '@skiplock/queue/engine';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createSagaRuntime, defineSaga } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { scrape } from '../../../test/support/prometheus.js';
import { fast, settled, silent, startSagas } from './fixtures.js';

const db = await useTestDatabase();

describe('saga metrics', () => {
  it('counts saga outcomes by definition and step in the registry the worker serves', async () => {
    const order = defineSaga({
      name: 'mt-order',
      version: 1,
      input: z.object({ refuse: z.boolean() }),
    })
      .step('reserve', { ...fast, run: () => ({ held: true }), compensate: () => {} })
      .step('charge', {
        ...fast,
        run: (ctx) => {
          if (ctx.input.refuse) throw new NonRetryableError('card declined');
          return { charged: true };
        },
      })
      .step('ship', { ...fast, run: () => ({ shipped: true }) });
    const broken = defineSaga({ name: 'mt-broken', version: 1, input: z.object({}) })
      .step('hold', {
        ...fast,
        run: () => 1,
        compensate: () => {
          throw new NonRetryableError('release API is down');
        },
      })
      .step('pay', {
        ...fast,
        run: () => {
          throw new NonRetryableError('no');
        },
      });

    // One registry for the runtime and the worker: one scrape covers both.
    const registry = new Registry();
    const runtime = createSagaRuntime({
      pool: db.pool,
      sagas: [order, broken],
      logger: silent,
      metrics: registry,
    });
    const worker = createWorker({
      pool: db.pool,
      jobs: runtime.jobs,
      logger: silent,
      pollIntervalMs: 20,
      sweeper: false,
      retention: false,
      metrics: registry,
    });
    const served = await serveMetrics({ registry, port: 0 });
    await worker.start();
    try {
      await runtime.start(order, { id: 'o-1', input: { refuse: false } });
      await runtime.start(order, { id: 'o-2', input: { refuse: false } });
      await runtime.start(order, { id: 'o-3', input: { refuse: true } });
      await runtime.start(broken, { id: 'b-1', input: {} });
      expect((await settled(runtime, 'o-1')).status).toBe('completed');
      expect((await settled(runtime, 'o-2')).status).toBe('completed');
      expect((await settled(runtime, 'o-3')).status).toBe('compensated');
      expect((await settled(runtime, 'b-1')).status).toBe('failed');

      const metrics = await scrape(served.url);
      expect(metrics.families.find((f) => f.name === 'skiplock_saga_outcomes_total')?.type).toBe(
        'COUNTER',
      );
      const outcomes = metrics
        .samples('skiplock_saga_outcomes_total')
        .map((s) => ({ ...s.labels, n: s.value }) as Record<string, string | number>)
        .sort((a, b) => `${a['saga']}${a['step']}`.localeCompare(`${b['saga']}${b['step']}`));
      // The step is where the saga ended: its last step, the last compensation it ran, or the
      // compensation that failed.
      expect(outcomes).toEqual([
        { saga: 'mt-broken', step: 'hold', outcome: 'failed', n: 1 },
        { saga: 'mt-order', step: 'reserve', outcome: 'compensated', n: 1 },
        { saga: 'mt-order', step: 'ship', outcome: 'completed', n: 2 },
      ]);
      // The worker's own metrics are in the same scrape.
      expect(
        metrics.value('skiplock_job_outcomes_total', { outcome: 'completed' }),
      ).toBeGreaterThan(0);
      expect(runtime.metrics.registry).toBe(registry);
    } finally {
      await worker.stop({ timeoutMs: 1_000 });
      await runtime.close();
      await served.close();
    }
  });

  it('a runtime given a registry cleared since an earlier one registers its metrics again', async () => {
    const once = defineSaga({ name: 'mt-cleared', version: 1, input: z.object({}) }).step('only', {
      ...fast,
      run: () => 1,
    });
    const registry = new Registry();
    const first = createSagaRuntime({
      pool: db.pool,
      sagas: [once],
      logger: silent,
      metrics: registry,
    });
    await first.close();
    // Between tests, or an application rebuilding its metrics.
    registry.clear();
    const { runtime } = await startSagas(db.pool, [once], { metrics: registry });
    expect(registry.getSingleMetric('skiplock_saga_outcomes_total')).toBe(runtime.metrics.outcomes);
    await runtime.start(once, { id: 'mt-cleared-1', input: {} });
    expect((await settled(runtime, 'mt-cleared-1')).status).toBe('completed');
    expect(await registry.getSingleMetricAsString('skiplock_saga_outcomes_total')).toContain(
      'skiplock_saga_outcomes_total{saga="mt-cleared",step="only",outcome="completed"} 1',
    );
  });
});
