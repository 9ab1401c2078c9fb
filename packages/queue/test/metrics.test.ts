import { connect } from 'node:net';
import { Counter, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createClient,
  createJobGauges,
  createQueueMetrics,
  createScheduler,
  defineJob,
  defineSchedule,
  pauseSchedule,
  NonRetryableError,
  serveMetrics,
} from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { metricValue } from '../../../test/support/metrics.js';
import { scrape } from '../../../test/support/prometheus.js';
import { waitFor } from '../../../test/support/wait.js';
import { fastBackoff, quiet, testWorker } from './fixtures.js';

const db = await useTestDatabase();

/** Jobs by queue and status in the table, every status of the queues asked (zeros included). */
async function tableCounts(queues: string[]) {
  const { rows } = await db.pool.query<{ queue: string; status: string; n: number }>(
    `SELECT q.queue, s.status::text AS status, count(j.id)::int AS n
     FROM unnest($1::text[]) q(queue)
     CROSS JOIN unnest(enum_range(NULL::skiplock.job_status)) s(status)
     LEFT JOIN skiplock.jobs j ON j.queue = q.queue AND j.status = s.status
     GROUP BY 1, 2`,
    [queues],
  );
  return Object.fromEntries(rows.map((r) => [`${r.queue}/${r.status}`, r.n]));
}

describe('Prometheus metrics', () => {
  it('a running worker serves histograms, outcome counters and job gauges that match what ran', async () => {
    const client = createClient({ pool: db.pool, logger: quiet });
    const attempts = new Map<string, number>();
    const ok = defineJob({
      type: 'mt-ok',
      queue: 'mt-a',
      payload: z.object({ n: z.number() }),
      handler: async () => {},
    });
    const flaky = defineJob({
      type: 'mt-flaky',
      queue: 'mt-a',
      payload: z.object({ n: z.number() }),
      backoff: fastBackoff,
      handler: async (_payload, ctx) => {
        attempts.set(ctx.job.id, ctx.job.attempt);
        if (ctx.job.attempt === 1) throw new Error('first attempt fails');
      },
    });
    const doomed = defineJob({
      type: 'mt-doomed',
      queue: 'mt-b',
      payload: z.object({ n: z.number() }),
      maxAttempts: 2,
      backoff: fastBackoff,
      handler: async () => {
        throw new Error('always fails');
      },
    });
    const fatal = defineJob({
      type: 'mt-fatal',
      queue: 'mt-b',
      payload: z.object({}),
      handler: async () => {
        throw new NonRetryableError('no point retrying');
      },
    });
    // A job of a queue this worker does not claim, whose worker "died": its lease ran out.
    const stale = defineJob({
      type: 'mt-stale',
      queue: 'mt-c',
      payload: z.object({}),
      handler: async () => {},
    });
    await client.enqueueMany(
      ok,
      [1, 2, 3, 4, 5].map((n) => ({ payload: { n } })),
    );
    await client.enqueue(ok, { n: 6 }, { delayMs: 3_600_000 });
    await client.enqueueMany(
      flaky,
      [1, 2, 3].map((n) => ({ payload: { n } })),
    );
    await client.enqueueMany(
      doomed,
      [1, 2].map((n) => ({ payload: { n } })),
    );
    await client.enqueue(fatal, {});
    const { id: staleId } = await client.enqueue(stale, {});
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'processing', attempts = 1, locked_by = 'gone',
         locked_at = now() - interval '1 hour', lease_expires_at = now() - interval '1 minute'
       WHERE id = $1`,
      [staleId],
    );

    const registry = new Registry();
    const worker = testWorker(db.pool, [ok, flaky, doomed, fatal], {
      metrics: registry,
      pollIntervalMs: 20,
      // Both run by hand below; their own loops wait an hour.
      sweeper: { intervalMs: 3_600_000 },
      jobGauges: { intervalMs: 3_600_000 },
    });
    expect(worker.metrics.registry).toBe(registry);
    const served = await serveMetrics({ registry, port: 0 });
    await worker.start();
    try {
      const outcomes = (outcome: string) =>
        metricValue(registry, 'skiplock_job_outcomes_total', { outcome });
      // 8 completed (5 + 3 after a retry) and 3 dead (2 spent, 1 non-retryable).
      await waitFor(
        async () => (await outcomes('completed')) === 8 && (await outcomes('dead')) === 3,
        {
          timeoutMs: 30_000,
          what: 'the jobs to settle',
        },
      );
      expect(await worker.sweeper!.runOnce()).toMatchObject({ recovered: 1, retried: 1 });
      await worker.jobGauges!.runOnce();

      const metrics = await scrape(served.url);
      expect(metrics.contentType).toBe(registry.contentType);
      const types = Object.fromEntries(metrics.families.map((f) => [f.name, f.type]));
      expect(types).toMatchObject({
        skiplock_job_lag_seconds: 'HISTOGRAM',
        skiplock_job_duration_seconds: 'HISTOGRAM',
        skiplock_claim_duration_seconds: 'HISTOGRAM',
        skiplock_claim_batch_size: 'HISTOGRAM',
        skiplock_job_outcomes_total: 'COUNTER',
        skiplock_lease_expiries_recovered_total: 'COUNTER',
        skiplock_jobs: 'GAUGE',
        skiplock_oldest_runnable_age_seconds: 'GAUGE',
        skiplock_schedules: 'GAUGE',
      });

      // Every attempt that ran: 5 + 3×2 + 2×2 + 1 = 16, each started once and timed once.
      const byType = { 'mt-ok': 5, 'mt-flaky': 6, 'mt-doomed': 4, 'mt-fatal': 1 };
      for (const [type, n] of Object.entries(byType)) {
        expect(metrics.value('skiplock_job_lag_seconds_count', { job_type: type })).toBe(n);
        expect(
          metrics.value('skiplock_job_lag_seconds_bucket', { job_type: type, le: '+Inf' }),
        ).toBe(n);
      }
      expect(metrics.value('skiplock_job_lag_seconds_count', { queue: 'mt-a' })).toBe(11);
      expect(metrics.value('skiplock_job_lag_seconds_sum')).toBeGreaterThanOrEqual(0);
      const duration = (job_type: string, outcome: string) =>
        metrics.value('skiplock_job_duration_seconds_count', { job_type, outcome });
      expect(duration('mt-ok', 'completed')).toBe(5);
      expect(duration('mt-flaky', 'retried')).toBe(3);
      expect(duration('mt-flaky', 'completed')).toBe(3);
      expect(duration('mt-doomed', 'retried')).toBe(2);
      expect(duration('mt-doomed', 'dead')).toBe(2);
      expect(duration('mt-fatal', 'dead')).toBe(1);
      expect(metrics.value('skiplock_job_duration_seconds_count')).toBe(16);

      // Buckets are cumulative and end at the count, series by series.
      for (const name of ['skiplock_job_lag_seconds', 'skiplock_job_duration_seconds']) {
        for (const series of metrics.samples(`${name}_count`)) {
          const buckets = metrics
            .samples(`${name}_bucket`)
            .filter((b) => Object.entries(series.labels).every(([k, v]) => b.labels[k] === v));
          const counts = buckets.map((b) => b.value);
          expect(counts).toEqual([...counts].sort((a, b) => a - b));
          expect(buckets.at(-1)).toMatchObject({ labels: { le: '+Inf' }, value: series.value });
        }
      }

      // Every attempt came from a claim (no hand-offs, no admissions); each claim was timed.
      expect(metrics.value('skiplock_claim_batch_size_sum')).toBe(16);
      const claims = metrics.value('skiplock_claim_batch_size_count');
      // Retries wait for their backoff, so at least a second claim took them.
      expect(claims).toBeGreaterThanOrEqual(2);
      expect(metrics.value('skiplock_claim_duration_seconds_count')).toBe(claims);
      expect(metrics.value('skiplock_claim_duration_seconds_bucket', { le: '+Inf' })).toBe(claims);
      expect(metrics.value('skiplock_claim_duration_seconds_sum')).toBeGreaterThan(0);

      const counted = (job_type: string, outcome: string, reason: string) =>
        metrics.value('skiplock_job_outcomes_total', { job_type, outcome, reason });
      expect(counted('mt-ok', 'completed', 'none')).toBe(5);
      expect(counted('mt-flaky', 'retried', 'error')).toBe(3);
      expect(counted('mt-flaky', 'completed', 'none')).toBe(3);
      expect(counted('mt-doomed', 'retried', 'error')).toBe(2);
      expect(counted('mt-doomed', 'dead', 'max_attempts')).toBe(2);
      expect(counted('mt-fatal', 'dead', 'non_retryable')).toBe(1);
      expect(metrics.value('skiplock_job_outcomes_total')).toBe(16);
      expect(
        metrics.value('skiplock_lease_expiries_recovered_total', {
          queue: 'mt-c',
          job_type: 'mt-stale',
          outcome: 'retried',
        }),
      ).toBe(1);
      expect(metrics.value('skiplock_claim_errors_total')).toBe(0);

      // The gauges hold what the table held at the refresh (nothing has moved since): the
      // worker's queues, and the queue its retryable job was found in.
      const table = await tableCounts(['mt-a', 'mt-b', 'mt-c']);
      const gauges = Object.fromEntries(
        metrics
          .samples('skiplock_jobs')
          .map((s) => [`${s.labels['queue']}/${s.labels['status']}`, s.value]),
      );
      expect(gauges).toEqual(table);
      expect(table).toMatchObject({
        'mt-a/completed': 8,
        'mt-a/pending': 1,
        'mt-b/dead': 3,
        'mt-c/retryable': 1,
      });
      // The delayed job is not runnable yet, and the swept one waits for its retry.
      expect(metrics.value('skiplock_oldest_runnable_age_seconds', { queue: 'mt-a' })).toBe(0);
      expect(metrics.value('skiplock_gauges_refreshed_timestamp_seconds')).toBeGreaterThan(
        Date.now() / 1000 - 60,
      );

      expect((await fetch(served.url.replace('/metrics', '/other'))).status).toBe(404);
    } finally {
      await worker.stop();
      await served.close();
      await client.close();
    }
  });

  it('counts above the limit fall back to the estimate, and vanished queues leave the gauges', async () => {
    const client = createClient({ pool: db.pool, logger: quiet });
    const bulk = defineJob({
      type: 'gauge-bulk',
      queue: 'gauge-bulk',
      payload: z.object({}),
      handler: async () => {},
    });
    await client.enqueueMany(
      bulk,
      Array.from({ length: 50 }, () => ({ payload: {} })),
    );
    await db.pool.query(`UPDATE skiplock.jobs SET run_at = now() - interval '10 minutes'
                         WHERE queue = 'gauge-bulk'`);
    await db.pool.query('ANALYZE skiplock.jobs');
    const metrics = createQueueMetrics();
    const gauges = createJobGauges({ pool: db.pool, metrics, countLimit: 10, logger: quiet });
    const first = await gauges.runOnce();
    const pending = first.jobs.find((j) => j.queue === 'gauge-bulk' && j.status === 'pending');
    // Ten counted, then the planner's estimate (from the ANALYZE above) stands in.
    expect(pending).toMatchObject({ estimated: true });
    expect(pending!.count).toBeGreaterThanOrEqual(10);
    // None retryable: the planner's floor of one row is not taken for one.
    expect(first.jobs.find((j) => j.queue === 'gauge-bulk' && j.status === 'retryable')).toEqual({
      queue: 'gauge-bulk',
      status: 'retryable',
      count: 0,
      estimated: true,
    });
    expect(first.oldestRunnableAgeSeconds['gauge-bulk']).toBeGreaterThanOrEqual(590);
    expect(await metricValue(metrics, 'skiplock_jobs', { queue: 'gauge-bulk' })).toBe(
      pending!.count,
    );

    await db.pool.query(`DELETE FROM skiplock.jobs WHERE queue = 'gauge-bulk'`);
    await gauges.runOnce();
    const family = await metrics.jobs.get();
    expect(family.values.filter((v) => v.labels.queue === 'gauge-bulk')).toEqual([]);
    await client.close();
  });

  it('counts the schedules by run state, so an alert can fire on one no scheduler runs', async () => {
    const tick = defineJob({
      type: 'gauge-tick',
      queue: 'gauge-tick',
      payload: z.object({}),
      handler: () => {},
    });
    const schedule = (name: string) =>
      defineSchedule({ name, cron: '0 * * * *', job: tick, payload: () => ({}) });
    await createScheduler({
      pool: db.pool,
      schedules: ['g-active', 'g-paused', 'g-unseen', 'g-unmarked'].map(schedule),
      logger: quiet,
    }).runOnce();
    await pauseSchedule(db.pool, 'g-paused');
    // Last seen ten minutes ago, recorded an hour ago; and one never marked (a pre-0018 version).
    await db.pool.query(`UPDATE skiplock.schedules SET seen_at = now() - interval '10 minutes',
                           updated_at = now() - interval '1 hour' WHERE name = 'g-unseen'`);
    await db.pool.query(`UPDATE skiplock.schedules SET seen_at = NULL, seen_for = NULL
                         WHERE name = 'g-unmarked'`);
    const metrics = createQueueMetrics();
    const gauges = createJobGauges({ pool: db.pool, metrics, logger: quiet });
    const expected = { active: 1, paused: 1, not_seen: 1, unknown: 1 };
    expect((await gauges.runOnce()).schedules).toEqual(expected);
    for (const [state, n] of Object.entries(expected)) {
      expect(await metricValue(metrics, 'skiplock_schedules', { state })).toBe(n);
    }
    await db.pool.query(`DELETE FROM skiplock.schedules WHERE name LIKE 'g-%'`);
    // A database migrated before 0018: no schedule series, and the job gauges still refresh.
    await db.pool.query('ALTER TABLE skiplock.schedules DROP COLUMN seen_for');
    try {
      const older = await gauges.runOnce();
      expect(older.schedules).toBeNull();
      expect((await metrics.schedules.get()).values).toEqual([]);
      expect(older.jobs.length).toBeGreaterThan(0);
    } finally {
      await db.pool.query('ALTER TABLE skiplock.schedules ADD COLUMN seen_for jsonb');
    }
  });

  it('a second refresher on the registry removes the queues the first one reported', async () => {
    const client = createClient({ pool: db.pool, logger: quiet });
    const job = defineJob({
      type: 'gauge-handover',
      queue: 'gauge-handover',
      payload: z.object({}),
      handler: async () => {},
    });
    await client.enqueueMany(job, [{ payload: {} }, { payload: {} }]);
    const registry = new Registry();
    // A worker's refresher, then its replacement's on the same registry (a restart in-process).
    const before = createJobGauges({ pool: db.pool, metrics: registry, logger: quiet });
    await before.runOnce();
    await before.stop();
    const series = async () =>
      (await before.metrics.jobs.get()).values.filter((v) => v.labels.queue === 'gauge-handover');
    const ages = async () =>
      (await before.metrics.oldestRunnableAge.get()).values.filter(
        (v) => v.labels.queue === 'gauge-handover',
      );
    expect((await series()).find((v) => v.labels.status === 'pending')?.value).toBe(2);
    await db.pool.query(`DELETE FROM skiplock.jobs WHERE queue = 'gauge-handover'`);
    const after = createJobGauges({ pool: db.pool, metrics: registry, logger: quiet });
    expect(after.metrics).toBe(before.metrics);
    await after.runOnce();
    expect(await series()).toEqual([]);
    expect(await ages()).toEqual([]);
    await client.close();
  });

  it('caps the queues with series of their own, sums the rest into _other, and bounds the estimates', async () => {
    const client = createClient({ pool: db.pool, logger: quiet });
    const job = defineJob({
      type: 'gauge-cap',
      queue: 'gauge-cap-00',
      payload: z.object({}),
      handler: async () => {},
    });
    // 60 queues with dead jobs only: the dead scan alone finds them all.
    await client.enqueueMany(
      job,
      Array.from({ length: 60 }, (_, i) => ({
        payload: {},
        queue: `gauge-cap-${String(i).padStart(2, '0')}`,
      })),
    );
    await db.pool.query(`UPDATE skiplock.jobs SET status = 'dead', completed_at = now()
                         WHERE job_type = 'gauge-cap'`);
    const metrics = createQueueMetrics();
    const gauges = createJobGauges({ pool: db.pool, metrics, maxQueues: 50, logger: quiet });
    const result = await gauges.runOnce();
    const labelled = new Set((await metrics.jobs.get()).values.map((v) => v.labels.queue));
    expect(labelled.size).toBeLessThanOrEqual(51);
    expect(labelled.has('_other')).toBe(true);
    expect(result.otherQueues).toBeGreaterThanOrEqual(10);
    // Nothing is lost: every dead job is in a named series or in _other.
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM skiplock.jobs WHERE status = 'dead'`,
    );
    const dead = result.jobs.filter((j) => j.status === 'dead').reduce((a, j) => a + j.count, 0);
    expect(dead).toBe(rows[0]!.n);

    // The dead scan capped (countLimit 60, fewer than the dead jobs): every named queue's dead
    // count wants an estimate, but a refresh asks for at most ten.
    let explains = 0;
    const counting = {
      query: (text: string, values: unknown[]) => {
        if (/^\s*EXPLAIN/i.test(text)) explains += 1;
        return db.pool.query(text, values);
      },
    } as unknown as typeof db.pool;
    const capped = createJobGauges({
      pool: counting,
      metrics: createQueueMetrics(),
      countLimit: 60,
      logger: quiet,
    });
    const second = await capped.runOnce();
    expect(second.jobs.filter((j) => j.estimated).length).toBeGreaterThan(10);
    expect(explains).toBeGreaterThan(0);
    expect(explains).toBeLessThanOrEqual(10);
    expect(new Set(second.jobs.map((j) => j.queue)).size).toBeLessThanOrEqual(51);
    await client.close();
  });

  it('one registry holds one set of metrics: a second worker or service records into it', async () => {
    const registry = new Registry();
    const job = defineJob({ type: 'mt-shared', payload: z.object({}), handler: async () => {} });
    const a = testWorker(db.pool, [job], { metrics: registry });
    const b = testWorker(db.pool, [job], { metrics: a.metrics });
    expect(b.metrics).toBe(a.metrics);
    expect(createQueueMetrics(registry)).toBe(a.metrics);
    expect(registry.getSingleMetric('skiplock_job_outcomes_total')).toBe(a.metrics.jobOutcomes);
    // Without one, each worker has a registry of its own, never prom-client's global registry.
    const c = testWorker(db.pool, [job]);
    expect(c.metrics.registry).not.toBe(registry);
    // The job gauges are opt-in: no worker refreshes them unless told to.
    expect(c.jobGauges).toBeNull();
    expect(testWorker(db.pool, [job], { jobGauges: true }).jobGauges).not.toBeNull();
    const { register } = await import('prom-client');
    expect(register.getSingleMetric('skiplock_job_outcomes_total')).toBeUndefined();
    await Promise.all([a.stop(), b.stop(), c.stop()]);
  });

  it('a worker given a registry cleared since an earlier one registers its metrics again', async () => {
    const client = createClient({ pool: db.pool, logger: quiet });
    const job = defineJob({
      type: 'mt-cleared',
      queue: 'mt-cleared',
      payload: z.object({}),
      handler: async () => {},
    });
    const registry = new Registry();
    const options = { metrics: registry, queues: ['mt-cleared'] };
    const first = testWorker(db.pool, [job], options);
    await client.enqueue(job, {});
    expect(await first.runOnce()).toBe(1);
    await first.stop();
    // Between tests, or an application rebuilding its metrics.
    registry.clear();
    const second = testWorker(db.pool, [job], options);
    expect(registry.getSingleMetric('skiplock_job_outcomes_total')).toBe(
      second.metrics.jobOutcomes,
    );
    await client.enqueue(job, {});
    expect(await second.runOnce()).toBe(1);
    await second.stop();
    expect(
      await metricValue(registry, 'skiplock_job_outcomes_total', { queue: 'mt-cleared' }),
    ).toBe(1);
    await client.close();
  });

  it('serves several registries merged, and answers 500 when two hold the same metric', async () => {
    const own = createQueueMetrics();
    own.claimErrors.inc(2);
    const app = new Registry();
    const hits = new Counter({ name: 'app_hits_total', help: 'Hits.', registers: [app] });
    hits.inc(3);
    const merged = await serveMetrics({ registry: [own, app], port: 0 });
    const clash = await serveMetrics({ registry: [own, createQueueMetrics()], port: 0 });
    try {
      const metrics = await scrape(merged.url);
      expect(metrics.value('skiplock_claim_errors_total')).toBe(2);
      expect(metrics.value('app_hits_total')).toBe(3);
      const response = await fetch(clash.url);
      expect(response.status).toBe(500);
      expect(await response.text()).toMatch(/skiplock_/);
    } finally {
      await Promise.all([merged.close(), clash.close()]);
    }
  });

  it('refuses a port or host it cannot listen on as asked, by name', async () => {
    const registry = new Registry();
    // Before: a string port listened on a Unix socket of that name in the working directory, no
    // port on a random one, an empty host on every address (the default is loopback only), and
    // -1, 70000 or 1.5 failed with Node's RangeError.
    for (const port of ['metrics', undefined, -1, 70_000, 1.5, Number.NaN]) {
      await expect(serveMetrics({ registry, port: port as number })).rejects.toThrow(
        /serveMetrics options: port must be an integer from 0 to 65535/,
      );
    }
    for (const host of ['', '  ', 42]) {
      await expect(serveMetrics({ registry, port: 0, host: host as string })).rejects.toThrow(
        /serveMetrics options: host must be a host name or address/,
      );
    }
    // A string of digits is the port it spells (Node's own reading); here a free one.
    const spelled = await serveMetrics({ registry, port: '0' as unknown as number });
    expect(spelled.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    await spelled.close();
    const v6 = await serveMetrics({ registry, port: 0, host: '::1' });
    try {
      expect(v6.url).toMatch(/^http:\/\/\[::1\]:\d+\/metrics$/);
      expect((await fetch(v6.url)).status).toBe(200);
    } finally {
      await v6.close();
    }
  });

  it('closes while a client holds a connection it has sent nothing on', async () => {
    const served = await serveMetrics({ registry: new Registry(), port: 0 });
    const { port } = served.server.address() as { port: number };
    const socket = connect(port, '127.0.0.1');
    socket.on('error', () => {});
    await new Promise((resolve) => socket.once('connect', resolve));
    const closedEarly = await new Promise((resolve) => {
      // Before: still pending after 150 s. Closed, the socket ends too.
      socket.once('close', () => resolve(true));
      void served.close();
    });
    expect(closedEarly).toBe(true);
    expect(served.server.listening).toBe(false);
  });
});
