import { createSagaRuntime, readSaga } from '@skiplock/saga';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { approval } from './fixtures/approval-sagas.js';
import { fixture, startCli, type LogLine } from './run-cli.js';

const db = await useTestDatabase();
const env = { DATABASE_URL: db.url, SKIPLOCK_LOG_LEVEL: 'info' };
// Starts sagas only; the worker under test runs their jobs.
const runtime = createSagaRuntime({
  pool: db.pool,
  sagas: [approval],
  logger: pino({ level: 'silent' }),
});
afterAll(() => runtime.close());

const reason = (r: string) => (line: LogLine) => line.reason === r;

describe('skiplock worker with sagas', () => {
  it('runs the reconciler of the saga runtime the module exports: a saga whose job died unseen moves on', async () => {
    await runtime.start(approval, { id: 'stranded', input: { breakUndo: false } });
    const jobId = (await runtime.getSaga('stranded'))!.currentJobId!;
    // Cancelled by hand: no saga hook ran, and nothing but a reconciler looks at the saga again.
    await db.pool.query(`UPDATE skiplock.jobs SET status = 'cancelled' WHERE id = $1`, [jobId]);

    const worker = startCli(['worker', fixture('saga-runtime.ts'), '--no-listen'], env);
    // Before: no reconciler ran under `skiplock worker`, and the saga stayed running for good.
    const started = await worker.waitForLine(reason('saga_reconciler_started'), 30_000);
    expect(started.exports).toEqual(['export "runtime"']);
    await waitFor(async () => (await readSaga(db.pool, 'stranded'))?.status !== 'running', {
      what: 'the stranded saga to move on',
      timeoutMs: 30_000,
    });
    worker.child.kill('SIGTERM');
    expect((await worker.exited).code).toBe(0);
    expect(worker.lines.some(reason('saga_reconciler_missing'))).toBe(false);
    const saga = await readSaga(db.pool, 'stranded');
    expect(saga?.error ?? '').toContain(`job ${jobId} is cancelled`);
  }, 60_000);

  it('warns (saga_reconciler_missing) when the module runs saga jobs but exports no runtime', async () => {
    const worker = startCli(['worker', fixture('saga-jobs-only.ts'), '--no-listen'], env);
    const warning = await worker.waitForLine(reason('saga_reconciler_missing'), 30_000);
    expect(warning.level).toBe(40);
    expect(warning.msg).toContain('export const runtime = createSagaRuntime(...)');
    await worker.waitForLine(reason('started'));
    worker.child.kill('SIGTERM');
    expect((await worker.exited).code).toBe(0);
    expect(worker.lines.some(reason('saga_reconciler_started'))).toBe(false);
  }, 60_000);

  it('runs the jobs of a runtime the module exports alone, beside its reconciler', async () => {
    const worker = startCli(['worker', fixture('saga-runtime-only.ts'), '--no-listen'], env);
    // Before: "exports no job definitions", exit 2.
    const loaded = await worker.waitForLine(reason('jobs_loaded'), 30_000);
    expect((loaded.jobTypes as string[]).sort()).toEqual(runtime.jobs.map((j) => j.type).sort());
    await worker.waitForLine(reason('saga_reconciler_started'));
    worker.child.kill('SIGTERM');
    expect((await worker.exited).code).toBe(0);
  }, 60_000);
});
