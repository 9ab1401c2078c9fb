import { createClient, createWorker, defineJob } from '@skiplock/queue';
import { createSagaRuntime, defineSaga, readSaga } from '@skiplock/saga';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { approval } from './fixtures/approval-sagas.js';
import { fixture, runCli, runInProcess } from './run-cli.js';

const db = await useTestDatabase();
const env = { DATABASE_URL: db.url };
const silent = pino({ level: 'silent' });
const mod = fixture('approval-sagas.ts');
// Starts sagas only: no worker of this file runs their jobs, so each stays on its first step.
const runtime = createSagaRuntime({ pool: db.pool, sagas: [approval], logger: silent });
afterAll(() => runtime.close());

const start = (id: string) => runtime.start(approval, { id, input: { breakUndo: false } });
const stepJob = async (id: string) => (await runtime.getSaga(id))!.currentJobId!;

/**
 * The natural path (from an audit): the worker holding the step's last attempt was SIGKILLed, and
 * the sweeper of a worker of another module (no saga job types, so no saga hook) took the expired
 * lease back: the job is dead, the saga still `running` on it.
 */
async function sweptByAPlainWorker(id: string): Promise<string> {
  await start(id);
  const jobId = await stepJob(id);
  await db.pool.query(
    `UPDATE skiplock.jobs SET status = 'processing', attempts = max_attempts, locked_by = 'w-gone',
       locked_at = now() - interval '1 hour', lease_expires_at = now() - interval '50 minutes'
     WHERE id = $1`,
    [jobId],
  );
  const plain = defineJob({ type: 'plain', payload: z.object({}), handler: () => {} });
  const worker = createWorker({
    pool: db.pool,
    jobs: [plain],
    logger: silent,
    pollIntervalMs: 20,
    retention: false,
    sweeper: { intervalMs: 100 },
  });
  await worker.start();
  try {
    await waitFor(
      async () =>
        (await db.pool.query(`SELECT status FROM skiplock.jobs WHERE id = $1`, [jobId])).rows[0]
          ?.status === 'dead',
      { what: `the step job ${jobId} to be swept dead` },
    );
  } finally {
    await worker.stop({ timeoutMs: 1_000 });
  }
  expect((await readSaga(db.pool, id))?.status).toBe('running');
  return jobId;
}

describe('stranded sagas in the CLI', () => {
  it('sagas show says a saga is stranded on a dead, cancelled or deleted job, and what moves it', async () => {
    const dead = await sweptByAPlainWorker('stranded-dead');
    await start('stranded-cancelled');
    const cancelled = await stepJob('stranded-cancelled');
    await db.pool.query(`UPDATE skiplock.jobs SET status = 'cancelled' WHERE id = $1`, [cancelled]);
    await start('stranded-deleted');
    const deleted = await stepJob('stranded-deleted');
    await db.pool.query(`DELETE FROM skiplock.jobs WHERE id = $1`, [deleted]);
    await start('not-stranded');

    const [human, json, cancelledShown, deletedShown, fine] = await Promise.all([
      runCli(['sagas', 'show', 'stranded-dead'], env),
      runInProcess(['sagas', 'show', 'stranded-dead', '--json'], env),
      runInProcess(['sagas', 'show', 'stranded-cancelled'], env),
      runInProcess(['sagas', 'show', 'stranded-deleted', '--json'], env),
      runInProcess(['sagas', 'show', 'not-stranded', '--json'], env),
    ]);
    expect(human.code, human.stderr).toBe(0);
    // Before: only "running", and its step "pending" with 0 attempts, while its job was dead.
    expect(human.stdout).toMatch(
      new RegExp(
        `stranded: job ${dead} is dead \\(.*lease expired.*\\); a saga runtime's reconciler ` +
          `moves it on \\(skiplock sagas reconcile --module FILE\\)`,
      ),
    );
    expect(JSON.parse(json.stdout).stranded).toMatchObject({ jobId: dead, status: 'dead' });
    expect(cancelledShown.stdout).toContain(`stranded: job ${cancelled} is cancelled`);
    expect(JSON.parse(deletedShown.stdout).stranded).toEqual({
      kind: 'step',
      jobId: deleted,
      key: 'saga:stranded-deleted:reserve',
      status: 'missing',
      lastError: null,
    });
    expect(JSON.parse(fine.stdout).stranded).toBeNull();
  });

  it('sagas show says a waiting saga is stranded on a cancelled or deleted timeout job', async () => {
    // Its own queue, so this file's worker runs only its jobs; the CLI reads it with no
    // definition at hand. The deadline makes the wait's timeout job one a definition-free read
    // can miss (a wait timed by its own timeoutMs alone looks like a wait for a signal only).
    const gate = defineSaga({ name: 'gate', version: 1, input: z.object({}), queue: 'gates' })
      .step('open', { run: () => 1, compensate: () => {} })
      .waitFor('go', { payload: z.object({}), timeoutMs: 60_000 });
    const gates = createSagaRuntime({ pool: db.pool, sagas: [gate], logger: silent });
    const worker = createWorker({
      pool: db.pool,
      jobs: gates.jobs,
      logger: silent,
      sweeper: false,
      retention: false,
      listen: false,
    });
    const keyOf = (id: string) => `saga:${id}:timeout:go`;
    const timeoutJob = async (id: string) =>
      (
        await db.pool.query<{ id: string }>(
          `SELECT id::text FROM skiplock.jobs WHERE idempotency_key = $1`,
          [keyOf(id)],
        )
      ).rows[0]!.id;
    try {
      for (const id of ['gate-cut', 'gate-gone']) {
        await gates.start(gate, { id, input: {}, deadlineMs: 60_000 });
        await waitFor(
          async () => {
            await worker.runOnce();
            return (await readSaga(db.pool, id))?.status === 'waiting';
          },
          { what: `saga ${id} to wait` },
        );
      }
      const cut = await timeoutJob('gate-cut');
      const client = createClient({ pool: db.pool, logger: silent });
      expect(await client.cancelJob(cut)).toBe(true);
      await client.close();
      await db.pool.query(`DELETE FROM skiplock.jobs WHERE id = $1`, [
        await timeoutJob('gate-gone'),
      ]);

      const [human, json] = await Promise.all([
        runInProcess(['sagas', 'show', 'gate-cut'], env),
        runInProcess(['sagas', 'show', 'gate-cut', '--json'], env),
      ]);
      expect(human.code, human.stderr).toBe(0);
      // Before: only "waiting", as if its timeout would still end the wait.
      expect(human.stdout).toContain(
        `stranded: its wait's timeout job ${cut} is cancelled; a saga runtime's reconciler ` +
          'moves it on (skiplock sagas reconcile --module FILE)',
      );
      expect(JSON.parse(json.stdout).stranded).toEqual({
        kind: 'timeout',
        jobId: cut,
        key: keyOf('gate-cut'),
        status: 'cancelled',
        lastError: null,
      });
      // No id to name: the saga does not record its timeout job, found by key.
      expect((await runInProcess(['sagas', 'show', 'gate-gone'], env)).stdout).toContain(
        `stranded: its wait's timeout job (key ${keyOf('gate-gone')}) no longer exists;`,
      );
    } finally {
      await worker.stop({ timeoutMs: 1_000 });
      await gates.close();
    }
  });

  it('sagas cancel on a stranded saga says the cancel waits for a reconciler', async () => {
    const jobId = await sweptByAPlainWorker('cancel-stranded');
    const human = await runInProcess(['sagas', 'cancel', 'cancel-stranded', '--module', mod], env);
    expect(human.code, human.stderr).toBe(0);
    // Before: "cancel accepted; it is running and compensates what it completed", and nothing
    // moved.
    expect(human.stdout).toContain('saga cancel-stranded: cancel recorded, but nothing moves');
    expect(human.stdout).toContain(`stranded: job ${jobId} is dead`);
    expect(human.stdout).not.toContain('cancel accepted');
    const json = await runInProcess(
      ['sagas', 'cancel', 'cancel-stranded', '--module', mod, '--json'],
      env,
    );
    expect(JSON.parse(json.stdout)).toMatchObject({
      accepted: true,
      stranded: { jobId, status: 'dead' },
    });
  });

  it('sagas reconcile moves the stranded sagas on and prints which (text and --json)', async () => {
    await start('reconcile-a');
    const a = await stepJob('reconcile-a');
    await db.pool.query(`UPDATE skiplock.jobs SET status = 'cancelled' WHERE id = $1`, [a]);
    await start('reconcile-b');
    await db.pool.query(`DELETE FROM skiplock.jobs WHERE id = $1`, [await stepJob('reconcile-b')]);

    // Every stranded saga of this file's earlier tests goes too: one pass takes them all.
    const json = await runInProcess(['sagas', 'reconcile', '--module', mod, '--json'], env);
    expect(json.code, json.stderr).toBe(0);
    const result = JSON.parse(json.stdout) as {
      ran: boolean;
      reconciled: number;
      sagas: { id: string; status: string }[];
    };
    expect(result.ran).toBe(true);
    expect(result.sagas.map((s) => s.id)).toEqual(
      expect.arrayContaining(['reconcile-a', 'reconcile-b']),
    );
    expect(result.sagas.map((s) => s.id)).not.toContain('not-stranded');
    for (const s of result.sagas) expect(s.status).not.toBe('running');
    expect(result.reconciled).toBe(result.sagas.length);
    expect((await readSaga(db.pool, 'reconcile-a'))?.stranded).toBeNull();

    await start('reconcile-c');
    await db.pool.query(`DELETE FROM skiplock.jobs WHERE id = $1`, [await stepJob('reconcile-c')]);
    const human = await runCli(['sagas', 'reconcile', '--module', mod], env);
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toMatch(/^1 saga moved on:\n {2}reconcile-c {2}now \w+\n$/);
    const again = await runInProcess(['sagas', 'reconcile', '--module', mod], env);
    expect(again.stdout).toBe('no stranded saga found\n');
    expect((await readSaga(db.pool, 'not-stranded'))?.status).toBe('running');
  });

  it('sagas reconcile looks at every live saga, past a pass of --batch-size', async () => {
    for (let i = 0; i < 5; i++) await start(`busy-${i}`);
    await start('behind');
    await db.pool.query(`UPDATE skiplock.jobs SET status = 'cancelled' WHERE id = $1`, [
      await stepJob('behind'),
    ]);
    // The cancel touches the saga: least recently moved first, it is now the last one read.
    expect((await runInProcess(['sagas', 'cancel', 'behind', '--module', mod], env)).code).toBe(0);
    const result = await runInProcess(
      ['sagas', 'reconcile', '--module', mod, '--batch-size', '3', '--json'],
      env,
    );
    expect(result.code, result.stderr).toBe(0);
    // Before: one pass of 3 said none was found, and the saga stayed running.
    expect(
      (JSON.parse(result.stdout) as { sagas: { id: string }[] }).sagas.map((x) => x.id),
    ).toContain('behind');
    expect((await readSaga(db.pool, 'behind'))?.status).not.toBe('running');
  });

  it('sagas reconcile leaves a stranded saga the module does not define, or with --unknown-versions fail fails it', async () => {
    // Defined elsewhere (another module, or a version this one dropped): not in `mod`.
    const elsewhere = defineSaga({ name: 'elsewhere', version: 1, input: z.object({}) }).step('a', {
      run: () => 1,
      compensate: () => {},
    });
    const other = createSagaRuntime({ pool: db.pool, sagas: [elsewhere], logger: silent });
    try {
      await other.start(elsewhere, { id: 'foreign', input: {} });
      const jobId = (await other.getSaga('foreign'))!.currentJobId;
      await db.pool.query(`UPDATE skiplock.jobs SET status = 'cancelled' WHERE id = $1`, [jobId]);
    } finally {
      await other.close();
    }
    const human = await runInProcess(['sagas', 'reconcile', '--module', mod], env);
    expect(human.code, human.stderr).toBe(0);
    // Before: failed without compensation ("1 saga moved on: foreign now failed").
    expect(human.stdout).toBe(
      '1 stranded saga left as it is: the module does not define the version (or the step) ' +
        'each is on; a module that does moves them on and compensates, or --unknown-versions ' +
        'fail fails them without compensation:\n  foreign\n',
    );
    expect((await readSaga(db.pool, 'foreign'))?.status).toBe('running');
    const json = await runInProcess(['sagas', 'reconcile', '--module', mod, '--json'], env);
    expect(JSON.parse(json.stdout)).toEqual({
      ran: true,
      reconciled: 0,
      sagas: [],
      left: ['foreign'],
    });

    const bad = await runInProcess(
      ['sagas', 'reconcile', '--module', mod, '--unknown-versions', 'drop'],
      env,
    );
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--unknown-versions must be leave or fail, got "drop"');

    const failed = await runInProcess(
      ['sagas', 'reconcile', '--module', mod, '--unknown-versions', 'fail', '--json'],
      env,
    );
    expect(JSON.parse(failed.stdout)).toEqual({
      ran: true,
      reconciled: 1,
      sagas: [{ id: 'foreign', status: 'failed' }],
      left: [],
    });
    expect((await readSaga(db.pool, 'foreign'))?.error).toMatch(
      /no runtime here knows saga "elsewhere" version 1$/,
    );
  });
});
