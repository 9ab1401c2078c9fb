import { NonRetryableError } from '@skiplock/queue';
import { defineSaga } from '@skiplock/saga';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { sagaStatuses } from '../src/commands/sagas-list.js';
import { runCli, runInProcess } from './run-cli.js';
import { startSagaWorker } from './saga-worker.js';

const db = await useTestDatabase();
const env = { DATABASE_URL: db.url };

// A real saga run to its end in this process, so the CLI reads what the runtime wrote.
const order = defineSaga({
  name: 'order',
  version: 2,
  input: z.object({ sku: z.string(), declined: z.boolean() }),
})
  .step('reserve', {
    run: (ctx) => ({ reservation: `r-${ctx.input.sku}` }),
    compensate: () => {},
  })
  .step('charge', {
    pivot: true,
    run: (ctx) => {
      if (ctx.input.declined) throw new NonRetryableError('card declined');
      return { charged: 42 };
    },
  });

const { runtime } = await startSagaWorker(db.pool, [order]);
await runtime.start(order, { id: 'order-ok', input: { sku: 'a1', declined: false } });
await runtime.start(order, { id: 'order-declined', input: { sku: 'b2', declined: true } });
await waitFor(
  async () => {
    const [ok, declined] = await Promise.all([
      runtime.getSaga('order-ok'),
      runtime.getSaga('order-declined'),
    ]);
    return ok?.status === 'completed' && declined?.status === 'compensated';
  },
  { what: 'both sagas to finish' },
);

describe('skiplock sagas', () => {
  it('knows every saga status of the schema', async () => {
    const { rows } = await db.pool.query<{ status: string }>(
      'SELECT unnest(enum_range(NULL::skiplock.saga_status))::text AS status',
    );
    expect([...sagaStatuses]).toEqual(rows.map((r) => r.status));
  });

  it('lists sagas as a table and as JSON with stable keys, filtered by status', async () => {
    const [human, all, compensated, page] = await Promise.all([
      runCli(['sagas', 'list'], env),
      runCli(['sagas', 'list', '--json'], env),
      runInProcess(['sagas', 'list', '--json', '--status', 'compensated'], env),
      runInProcess(['sagas', 'list', '--json', '--limit', '1'], env),
    ]);
    expect(human.code, human.stderr).toBe(0);
    const lines = human.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(
      /^ID\s+NAME\s+VERSION\s+STATUS\s+CURRENT\s+CREATED\s+UPDATED\s+ERROR$/,
    );
    expect(lines).toContainEqual(expect.stringMatching(/^order-ok\s+order\s+2\s+completed\s/));
    expect(lines).toContainEqual(
      expect.stringMatching(/^order-declined\s+order\s+2\s+compensated\s.*card declined/),
    );

    const listed = JSON.parse(all.stdout) as { sagas: Record<string, unknown>[]; nextCursor: null };
    expect(listed.nextCursor).toBeNull();
    expect(listed.sagas.map((s) => s.id).sort()).toEqual(['order-declined', 'order-ok']);
    for (const s of listed.sagas) {
      expect(Object.keys(s)).toEqual([
        'id',
        'name',
        'version',
        'status',
        'currentStep',
        'currentKind',
        'currentJobId',
        'pivoted',
        'cancelRequested',
        'deadline',
        'error',
        'createdAt',
        'updatedAt',
        'finishedAt',
        'lockKey',
        'parent',
      ]);
    }
    const only = JSON.parse(compensated.stdout) as { sagas: { id: string }[] };
    expect(only.sagas.map((s) => s.id)).toEqual(['order-declined']);

    const first = JSON.parse(page.stdout) as { sagas: { id: string }[]; nextCursor: string };
    expect(first.sagas).toHaveLength(1);
    const next = await runInProcess(['sagas', 'list', '--json', '--cursor', first.nextCursor], env);
    const second = JSON.parse(next.stdout) as { sagas: { id: string }[]; nextCursor: null };
    expect([...first.sagas, ...second.sagas].map((s) => s.id).sort()).toEqual([
      'order-declined',
      'order-ok',
    ]);
    expect(second.nextCursor).toBeNull();
  });

  it('shows a saga with every step and compensation', async () => {
    const [json, human] = await Promise.all([
      runCli(['sagas', 'show', 'order-declined', '--json'], env),
      runCli(['sagas', 'show', 'order-declined'], env),
    ]);
    expect(json.code, json.stderr).toBe(0);
    const view = JSON.parse(json.stdout) as {
      saga: Record<string, unknown>;
      history: Record<string, unknown>[];
      signals: unknown[];
      children: unknown[];
      stranded: unknown;
    };
    expect(Object.keys(view)).toEqual(['saga', 'history', 'signals', 'children', 'stranded']);
    expect(view.children).toEqual([]);
    expect(view.stranded).toBeNull();
    expect(view.saga).toMatchObject({
      id: 'order-declined',
      name: 'order',
      version: 2,
      status: 'compensated',
      input: { sku: 'b2', declined: true },
    });
    expect(view.history.map((h) => [h.kind, h.step, h.status])).toEqual([
      ['step', 'reserve', 'completed'],
      ['step', 'charge', 'failed'],
      ['compensation', 'reserve', 'completed'],
    ]);
    expect(view.history[0]!.output).toEqual({ reservation: 'r-b2' });
    expect(Object.keys(view.history[0]!)).toEqual([
      'step',
      'kind',
      'status',
      'attempts',
      'jobId',
      'output',
      'error',
      'createdAt',
      'startedAt',
      'finishedAt',
    ]);

    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toContain('saga order-declined  order v2  compensated');
    expect(human.stdout).toMatch(/reserve\s+completed\s+1\s+\d+\s+.*\{"reservation":"r-b2"\}/);
    expect(human.stdout).toMatch(/charge\s+failed\s+1\s+.*card declined/);
    expect(human.stdout).toMatch(/undo reserve\s+completed/);
  });

  it('fails clearly for a saga that does not exist or a bad argument', async () => {
    const [missing, badStatus, badCursor] = await Promise.all([
      runCli(['sagas', 'show', 'no-such-saga'], env),
      runInProcess(['sagas', 'list', '--status', 'done'], env),
      runInProcess(['sagas', 'list', '--cursor', 'garbage'], env),
    ]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toBe('skiplock sagas show: saga "no-such-saga" does not exist\n');
    expect(badStatus.code).toBe(2);
    expect(badStatus.stderr).toContain('--status must be one of running, waiting');
    expect(badCursor.code).toBe(2);
    expect(badCursor.stderr).toContain('--cursor is not a cursor from an earlier `sagas list`');
  });
});
