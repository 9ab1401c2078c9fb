import { defineSaga } from '@skiplock/saga';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { approval, controls, fanout, gates } from './fixtures/approval-sagas.js';
import { fixture, runCli, runInProcess } from './run-cli.js';
import { startSagaWorker } from './saga-worker.js';

const db = await useTestDatabase();
const env = { DATABASE_URL: db.url };
const module = fixture('approval-sagas.ts');
// A version the module does not export: the CLI must refuse to act on its sagas.
const approvalV2 = defineSaga({ name: 'approval', version: 2, input: z.object({}) }).step('x', {
  run: () => null,
});

const { runtime } = await startSagaWorker(db.pool, [approval, approvalV2, fanout]);

async function until(id: string, status: string) {
  return waitFor(async () => (await runtime.getSaga(id))?.status === status || null, {
    what: `saga ${id} to be ${status}`,
  });
}
/**
 * At its wait step and parked there: `currentStep` reads `approved` while the wait's job still
 * runs, before the saga is `waiting`.
 */
async function waiting(id: string) {
  return waitFor(
    async () => {
      const saga = await runtime.getSaga(id);
      return (saga?.currentStep === 'approved' && saga.status === 'waiting') || null;
    },
    { what: `saga ${id} to wait` },
  );
}

describe('skiplock sagas cancel, retry and signal', () => {
  it('signals a waiting saga on: payload checked by the wait, a repeat ignored', async () => {
    await runtime.start(approval, { id: 'ap-signal', input: { breakUndo: false } });
    await waiting('ap-signal');
    const bad = await runCli(
      ['sagas', 'signal', 'ap-signal', 'approved', '--module', module, '--payload', '{"by":1}'],
      env,
    );
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('invalid signal "approved": payload.by');
    expect(bad.stderr).toContain('(invalid_signal)');
    expect((await runtime.getSaga('ap-signal'))?.status).toBe('waiting');

    const ok = await runCli(
      ['sagas', 'signal', 'ap-signal', 'approved', '--module', module, '--payload', '{"by":"ops"}'],
      env,
    );
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/^saga ap-signal: signal approved delivered; the step waiting/);
    const done = await until('ap-signal', 'completed');
    expect(done && (await runtime.getSaga('ap-signal'))?.history.at(-1)?.output).toEqual({
      by: 'ops',
    });

    const again = await runInProcess(
      [
        'sagas',
        'signal',
        'ap-signal',
        'approved',
        '--module',
        module,
        '--payload',
        '{"by":"ops"}',
        '--json',
      ],
      env,
    );
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toEqual({
      id: 'ap-signal',
      signal: 'approved',
      delivered: false,
      resumed: false,
      status: 'completed',
    });
    const unknown = await runInProcess(
      ['sagas', 'signal', 'ap-signal', 'nope', '--module', module],
      env,
    );
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('waits for no signal "nope" (it waits for: approved)');
    const notJson = await runInProcess(
      ['sagas', 'signal', 'ap-signal', 'approved', '--module', module, '--payload', '{by'],
      env,
    );
    expect(notJson.code).toBe(2);
    expect(notJson.stderr).toContain('--payload is not JSON');
  });

  it('cancels a waiting saga, which compensates; a second cancel is refused', async () => {
    await runtime.start(approval, { id: 'ap-cancel', input: { breakUndo: false } });
    await waiting('ap-cancel');
    const cancel = await runCli(['sagas', 'cancel', 'ap-cancel', '--module', module], env);
    expect(cancel.stderr).toBe('');
    expect(cancel.code).toBe(0);
    expect(cancel.stdout).toContain('saga ap-cancel: cancel accepted');
    await until('ap-cancel', 'cancelled');
    const history = (await runtime.getSaga('ap-cancel'))!.history;
    expect(history.find((h) => h.kind === 'compensation' && h.step === 'reserve')?.status).toBe(
      'completed',
    );

    const again = await runInProcess(
      ['sagas', 'cancel', 'ap-cancel', '--module', module, '--json'],
      env,
    );
    expect(again.code).toBe(1);
    expect(JSON.parse(again.stdout)).toEqual({
      id: 'ap-cancel',
      accepted: false,
      status: 'cancelled',
      reason: 'finished',
      childrenNotCancelled: [],
      stranded: null,
    });
    expect(again.stderr).toContain('saga "ap-cancel" is cancelled; cancel refused (finished)');
  });

  it('a cancel, a retry and a signal of a saga another transaction holds exit 1 after 5 s, changing nothing', async () => {
    await runtime.start(approval, { id: 'ap-held', input: { breakUndo: false } });
    await waiting('ap-held');
    const holder = await db.pool.connect();
    try {
      // A producer's signal({ tx }) in its open transaction holds the saga's row so.
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM skiplock.sagas WHERE id = 'ap-held' FOR UPDATE`);
      // All at once: each waits its 5 s beside the others. Before, they hung as long as the
      // holder: bounded here so that the test fails instead of hanging.
      const began = performance.now();
      const runs = Promise.all([
        runInProcess(['sagas', 'cancel', 'ap-held', '--module', module], env),
        runInProcess(['sagas', 'retry', 'ap-held', '--module', module], env),
        runInProcess(
          ['sagas', 'signal', 'ap-held', 'approved', '--module', module, '--payload', '{"by":"x"}'],
          env,
        ),
      ]);
      const timedOut = new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error('waited for the held saga')), 20_000),
      );
      for (const run of await Promise.race([runs, timedOut])) {
        expect(run.code).toBe(1);
        expect(run.stderr).toMatch(
          /saga "ap-held": a lock it needs \(its row, .*waited 5000 ms for it and changed nothing: try again \(saga_busy\)/,
        );
      }
      expect(performance.now() - began).toBeGreaterThan(4_500);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    expect(await runtime.getSaga('ap-held')).toMatchObject({
      status: 'waiting',
      cancelRequested: false,
    });
    const cancel = await runInProcess(['sagas', 'cancel', 'ap-held', '--module', module], env);
    expect(cancel.code, cancel.stderr).toBe(0);
    await until('ap-held', 'cancelled');
  });

  it('retries the failed compensation of a saga once its cause is mended', async () => {
    controls.undoBroken = true;
    await runtime.start(approval, { id: 'ap-retry', input: { breakUndo: true } });
    await waiting('ap-retry');
    await runtime.cancel('ap-retry');
    await until('ap-retry', 'failed');

    const notFailed = await runInProcess(['sagas', 'retry', 'ap-signal', '--module', module], env);
    expect(notFailed.code).toBe(1);
    expect(notFailed.stderr).toContain('saga "ap-signal": nothing retried (not_failed)');

    controls.undoBroken = false;
    const retry = await runCli(['sagas', 'retry', 'ap-retry', '--module', module, '--json'], env);
    expect(retry.code, retry.stderr).toBe(0);
    expect(JSON.parse(retry.stdout)).toEqual({
      id: 'ap-retry',
      retried: true,
      step: 'reserve',
      kind: 'compensation',
      reason: null,
      childrenNotRetried: [],
    });
    await until('ap-retry', 'cancelled');
  });

  it('a cancel recorded while a branch could not be cancelled exits 1 and says what was done', async () => {
    await runtime.start(fanout, { id: 'fan', input: {} });
    const branches = ['fan:a', 'fan:b'];
    await waitFor(() => branches.every((b) => gates.has(b)) || null, { what: 'both branches' });
    const setStep = (step: string) =>
      db.pool.query(`UPDATE skiplock.sagas SET current_step = $1 WHERE id = 'fan/both/a'`, [step]);
    await setStep('gone');
    const partly = await runCli(['sagas', 'cancel', 'fan', '--module', module, '--json'], env);
    expect(partly.code).toBe(1);
    // Before: nothing on stdout, as if the cancel had been refused.
    expect(JSON.parse(partly.stdout)).toEqual({
      id: 'fan',
      accepted: true,
      status: 'waiting',
      reason: null,
      childrenNotCancelled: ['fan/both/a'],
      stranded: null,
    });
    expect(partly.stderr).toContain(
      'skiplock sagas cancel: saga "fan": the cancel is recorded, but child saga "fan/both/a"',
    );
    expect(partly.stderr).toContain('(children_not_cancelled)');
    expect((await runtime.getSaga('fan/both/b'))?.cancelRequested).toBe(true);
    await setStep('a');
    const again = await runInProcess(['sagas', 'cancel', 'fan', '--module', module], env);
    expect(again.code, again.stderr).toBe(0);
    for (const b of branches) gates.get(b)!();
    await until('fan', 'cancelled');
  });

  it('refuses a saga that does not exist, one of a version the module lacks, and bad arguments', async () => {
    const missing = await runInProcess(['sagas', 'cancel', 'nobody', '--module', module], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('saga "nobody" does not exist');

    await runtime.start(approvalV2, { id: 'ap-v2', input: {} });
    await until('ap-v2', 'completed');
    const unknown = await runInProcess(['sagas', 'retry', 'ap-v2', '--module', module], env);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain(
      'saga "ap-v2" is approval v2, which ' + module + ' does not export; it exports approval v1',
    );

    const noModule = await runInProcess(['sagas', 'cancel', 'ap-v2'], env);
    expect(noModule.code).toBe(2);
    expect(noModule.stderr).toContain('--module FILE is required');
    const badId = await runInProcess(['sagas', 'cancel', 'a b', '--module', module], env);
    expect(badId.code).toBe(2);
    expect(badId.stderr).toContain('<id> must be 1-200 printable characters');
    const noName = await runInProcess(['sagas', 'signal', 'ap-v2', '--module', module], env);
    expect(noName.code).toBe(2);
    const payloadOnCancel = await runInProcess(
      ['sagas', 'cancel', 'ap-v2', '--module', module, '--payload', '{}'],
      env,
    );
    expect(payloadOnCancel.code).toBe(2);
  });
});
