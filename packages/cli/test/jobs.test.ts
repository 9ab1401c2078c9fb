import { createClient, defineJob } from '@skiplock/queue';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { useTestDatabase } from '../../../test/support/db.js';
import { runCli, runInProcess, type CliResult } from './run-cli.js';

const db = await useTestDatabase();
const env = { DATABASE_URL: db.url };
const client = createClient({ pool: db.pool, logger: pino({ level: 'silent' }) });

const sendEmail = defineJob({
  type: 'send-email',
  payload: z.object({ to: z.string() }),
  handler: () => {},
});
const resize = defineJob({
  type: 'resize-image',
  queue: 'media',
  payload: z.object({ key: z.string() }),
  handler: () => {},
});

// One job in each interesting state, written directly, as a worker would have left them.
const ids = {
  pending: (await client.enqueue(sendEmail, { to: 'a@example.com' })).id,
  dead: (await client.enqueue(sendEmail, { to: 'b@example.com' }, { maxAttempts: 2 })).id,
  processing: (await client.enqueue(resize, { key: 'k1' })).id,
  completed: (await client.enqueue(resize, { key: 'k2' })).id,
  waiting: (await client.enqueue(sendEmail, { to: 'c@example.com' })).id,
  scheduled: (await client.enqueue(resize, { key: 'k3' }, { delayMs: 3_600_000 })).id,
};
await db.pool.query(
  `UPDATE skiplock.jobs SET status = 'dead', attempts = 2, last_error = 'smtp said no',
     errors = jsonb_build_array(
       jsonb_build_object('attempt', 1, 'reason', 'error', 'message', 'smtp timeout',
                          'at', now() - interval '5 minutes'),
       jsonb_build_object('attempt', 2, 'reason', 'error', 'message', 'smtp said no',
                          'at', now() - interval '1 minute')),
     created_at = now() - interval '10 minutes', updated_at = now() - interval '1 minute'
   WHERE id = $1`,
  [ids.dead],
);
await db.pool.query(
  `UPDATE skiplock.jobs SET status = 'processing', attempts = 1, locked_by = 'host:1:w',
     locked_at = now(), lease_expires_at = now() + interval '30 seconds' WHERE id = $1`,
  [ids.processing],
);
await db.pool.query(
  `UPDATE skiplock.jobs SET status = 'completed', attempts = 1, completed_at = now() WHERE id = $1`,
  [ids.completed],
);
await db.pool.query(
  `UPDATE skiplock.jobs SET status = 'retryable', attempts = 1, last_error = 'flaky',
     run_at = now() + interval '2 minutes',
     errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'reason', 'timeout',
                                'message', 'flaky', 'at', now()))
   WHERE id = $1`,
  [ids.waiting],
);

const summaryKeys = [
  'id',
  'queue',
  'jobType',
  'status',
  'priority',
  'attempts',
  'maxAttempts',
  'runAt',
  'createdAt',
  'updatedAt',
  'completedAt',
  'lockedAt',
  'lockedBy',
  'leaseExpiresAt',
  'leaseMs',
  'timeoutMs',
  'idempotencyKey',
  'concurrencyKey',
  'concurrencyLimit',
  'singletonKey',
  'lastError',
];

/** `--json` output of a command; in this process unless `real` asks for the binary. */
async function json(args: string[], real = false) {
  const result = await (real ? runCli : runInProcess)([...args, '--json'], env);
  expect(result.code, result.stderr).toBe(0);
  return JSON.parse(result.stdout) as Record<string, unknown>;
}

async function statusOf(id: string) {
  const { rows } = await db.pool.query<{ status: string; attempts: number }>(
    'SELECT status, attempts FROM skiplock.jobs WHERE id = $1',
    [id],
  );
  return rows[0];
}

describe('skiplock jobs', () => {
  it('lists jobs newest first as an aligned table with relative ages', async () => {
    const result = await runCli(['jobs', 'list'], env);
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^\s*ID\s+QUEUE\s+TYPE\s+STATUS\s+ATTEMPTS\s+CREATED\s+UPDATED/);
    const rowIds = lines.slice(1).map((l) => l.trim().split(/\s+/)[0]);
    expect(rowIds).toEqual(Object.values(ids).sort((a, b) => Number(b) - Number(a)));
    // Columns line up: every row has its status where the header has STATUS.
    const statusAt = lines[0]!.indexOf('STATUS');
    const deadLine = lines.find((l) => l.trim().startsWith(`${ids.dead} `))!;
    expect(deadLine.slice(statusAt)).toMatch(
      /^dead\s+2\/2\s+1[01]m ago\s+[12]m ago\s+-\s+smtp said no$/,
    );
    const waitingLine = lines.find((l) => l.trim().startsWith(`${ids.waiting} `))!;
    expect(waitingLine).toMatch(/retryable\s+1\/5 .* in (1m|\d+s)\s+flaky$/);
  });

  it('lists as JSON with stable keys, filters and keyset pages', async () => {
    const all = (await json(['jobs', 'list'], true)) as {
      jobs: Record<string, unknown>[];
      nextBeforeId: string | null;
    };
    expect(all.jobs).toHaveLength(6);
    for (const job of all.jobs) expect(Object.keys(job)).toEqual(summaryKeys);
    expect(all.nextBeforeId).toBeNull();

    type Listing = { jobs: { id: string; jobType: string }[]; nextBeforeId: string };
    const [dead, some, media, emails, page1] = (await Promise.all([
      json(['jobs', 'list', '--status', 'dead']),
      json(['jobs', 'list', '--status', 'dead,completed', '--status', 'retryable']),
      json(['jobs', 'list', '--queue', 'media']),
      json(['jobs', 'list', '--type', 'send-email']),
      json(['jobs', 'list', '--limit', '4']),
    ])) as Listing[];
    expect(dead!.jobs.map((j) => j.id)).toEqual([ids.dead]);
    expect(some!.jobs.map((j) => j.id).sort()).toEqual(
      [ids.dead, ids.completed, ids.waiting].sort(),
    );
    expect(media!.jobs.map((j) => j.jobType)).toEqual(Array(3).fill('resize-image'));
    expect(emails!.jobs.map((j) => j.jobType)).toEqual(Array(3).fill('send-email'));
    expect(page1!.jobs).toHaveLength(4);
    expect(page1!.nextBeforeId).toBe(page1!.jobs[3]!.id);
    const page2 = (await json(['jobs', 'list', '--limit', '4', '--before-id', page1!.nextBeforeId]))
      .jobs as { id: string }[];
    expect([...page1!.jobs, ...page2].map((j) => j.id)).toEqual(all.jobs.map((j) => j.id));
  });

  it('shows every field and the attempt history of one job', async () => {
    const [shownJson, human, processingJson] = await Promise.all([
      json(['jobs', 'show', ids.dead], true),
      runCli(['jobs', 'show', ids.dead], env),
      json(['jobs', 'show', ids.processing]),
    ]);
    const shown = shownJson as {
      job: Record<string, unknown>;
      timeline: Record<string, unknown>[];
    };
    expect(Object.keys(shown.job)).toEqual([...summaryKeys, 'payload', 'errors']);
    expect(shown.job).toMatchObject({
      id: ids.dead,
      status: 'dead',
      attempts: 2,
      maxAttempts: 2,
      payload: { to: 'b@example.com' },
      lastError: 'smtp said no',
    });
    expect(shown.timeline.map((t) => [t.event, t.attempt, t.message])).toEqual([
      ['enqueued', null, null],
      ['attempt_failed', 1, 'smtp timeout'],
      ['attempt_failed', 2, 'smtp said no'],
      ['dead', null, 'smtp said no'],
    ]);

    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toContain(`job ${ids.dead}  send-email  dead`);
    expect(human.stdout).toMatch(/attempts\s+2 of 2/);
    expect(human.stdout).toContain('"to": "b@example.com"');
    expect(human.stdout).toMatch(/5m ago\s+attempt failed\s+attempt 1 \(error\) smtp timeout/);
    expect(human.stdout).toMatch(/1m ago\s+dead\s+smtp said no/);

    const processing = processingJson as {
      job: { lockedBy: string };
      timeline: { event: string }[];
    };
    expect(processing.job.lockedBy).toBe('host:1:w');
    expect(processing.timeline.map((t) => t.event)).toEqual(['enqueued', 'claimed']);
  });

  it('fails with a clear message for a job that does not exist', async () => {
    const commands = ['show', 'retry', 'cancel'];
    const results = await Promise.all(
      commands.map((c) => runInProcess(['jobs', c, '987654321'], env)),
    );
    results.forEach((result, i) => {
      expect(result.code, commands[i]).toBe(1);
      expect(result.stderr).toBe(`skiplock jobs ${commands[i]}: job 987654321 does not exist\n`);
    });
  });

  it('retries a dead job with fresh attempts, and refuses a job in another state', async () => {
    const result = await runCli(['jobs', 'retry', ids.dead, '--json'], env);
    expect(result.code, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({
      id: ids.dead,
      previousStatus: 'dead',
      status: 'pending',
    });
    expect(await statusOf(ids.dead)).toEqual({ status: 'pending', attempts: 0 });

    const refused = await runInProcess(['jobs', 'retry', ids.completed], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      `job ${ids.completed} is completed; only dead, cancelled, retryable, waiting jobs, and processing ones whose lease has expired, can be retried`,
    );
    expect(await statusOf(ids.completed)).toEqual({ status: 'completed', attempts: 1 });
  });

  it('says what a retried job does now: runs, or waits for a slot of its key', async () => {
    const limited = { concurrencyKey: 'tenant-1', concurrencyLimit: 1 } as const;
    const holder = (await client.enqueue(sendEmail, { to: 'h@example.com' }, limited)).id;
    const retried = (await client.enqueue(sendEmail, { to: 'r@example.com' }, limited)).id;
    // The holder runs (its key's one slot is taken); the other died earlier.
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'processing', attempts = 1, locked_by = 'host:1:w',
         locked_at = now(), lease_expires_at = now() + interval '10 minutes' WHERE id = $1`,
      [holder],
    );
    await db.pool.query(`UPDATE skiplock.jobs SET status = 'dead', attempts = 5 WHERE id = $1`, [
      retried,
    ]);
    const waits = await runInProcess(['jobs', 'retry', retried], env);
    expect(waits.code, waits.stderr).toBe(0);
    expect(waits.stdout).toBe(
      `job ${retried} (send-email) was dead; it is waiting for a slot of key "tenant-1", then runs\n`,
    );
    expect((await statusOf(retried))!.status).toBe('waiting');

    const free = (await client.enqueue(sendEmail, { to: 'f@example.com' })).id;
    await db.pool.query(`UPDATE skiplock.jobs SET status = 'dead', attempts = 5 WHERE id = $1`, [
      free,
    ]);
    const runs = await runInProcess(['jobs', 'retry', free], env);
    expect(runs.stdout).toBe(`job ${free} (send-email) was dead; it is pending and runs now\n`);
  });

  it('cancels a job that is not running, and refuses a running one', async () => {
    const result = await runCli(['jobs', 'cancel', ids.scheduled], env);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toBe(
      `job ${ids.scheduled} (resize-image) was pending; it is cancelled\n`,
    );
    expect((await statusOf(ids.scheduled))!.status).toBe('cancelled');

    // Its lease renewed, as its worker would: the file's earlier tests may outlast the first one
    // (30 s), and a job whose lease has expired may be cancelled.
    await db.pool.query(
      `UPDATE skiplock.jobs SET lease_expires_at = now() + interval '10 minutes' WHERE id = $1`,
      [ids.processing],
    );
    const refused = await runCli(['jobs', 'cancel', ids.processing], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      `job ${ids.processing} is processing; only pending, retryable, waiting jobs, and processing ones whose lease has expired, can be cancelled; to stop a running job, add --running`,
    );
    expect((await statusOf(ids.processing))!.status).toBe('processing');
    // Asked to, it cancels a running one; its worker stops the handler at its next renewal.
    const stopped = await runCli(['jobs', 'cancel', ids.processing, '--running', '--json'], env);
    expect(stopped.code, stopped.stderr).toBe(0);
    expect(JSON.parse(stopped.stdout)).toEqual({
      id: ids.processing,
      previousStatus: 'processing',
      status: 'cancelled',
    });
    // Its handler has not returned (no worker here clears its lease): retried now, the job
    // could run beside its stopped run.
    const early = await runInProcess(['jobs', 'retry', ids.processing], env);
    expect(early.code).toBe(1);
    expect(early.stderr).toMatch(
      new RegExp(
        `job ${ids.processing} is cancelled, but its stopped run has not ended: its handler has not returned \\(its lease, and its concurrency slot, are held until it does or until \\S+Z\\); it can be retried once the run ends`,
      ),
    );
    expect((await statusOf(ids.processing))!.status).toBe('cancelled');
    // Cancelled again: it is cancelled already, which a cancel cannot change. Before, the
    // message said it could be cancelled once its run had ended.
    for (const again of [[], ['--running']]) {
      const twice = await runInProcess(['jobs', 'cancel', ids.processing, ...again], env);
      expect(twice.code).toBe(1);
      expect(twice.stderr).toContain(
        `job ${ids.processing} is cancelled; only pending, retryable, waiting jobs, and processing ones whose lease has expired, can be cancelled\n`,
      );
    }
    // Put back as the worker left it, for the other tests.
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'processing', lease_expires_at = now() + interval '30 seconds'
       WHERE id = $1`,
      [ids.processing],
    );
  });

  it("prints an application's escape sequences as text, never to the terminal", async () => {
    // Clear the screen, retitle the window, a C1 CSI (red) and a right-to-left override in an
    // error, a type and a payload.
    const error = 'boom \u001b[2J\u001b]0;owned\u0007 \u009b31m\r \u202etxt.exe';
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO skiplock.jobs (queue, job_type, status, last_error, payload)
       VALUES ('esc', $1, 'dead', $2, $3) RETURNING id::text`,
      ['evil\u001b[8m', error, JSON.stringify({ note: error })],
    );
    const id = rows[0]!.id;
    try {
      const results: CliResult[] = await Promise.all([
        runInProcess(['jobs', 'list', '--queue', 'esc'], env),
        runInProcess(['jobs', 'show', id], env),
        runInProcess(['jobs', 'show', id, '--json'], env),
      ]);
      results.push(await runInProcess(['jobs', 'retry', id], env));
      // eslint-disable-next-line no-control-regex
      const control = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202e]/;
      for (const { stdout, stderr } of results) {
        expect(control.test(stdout + stderr)).toBe(false);
      }
      const [list, show, shownJson, retried] = results;
      expect(retried!.stdout).toContain(`job ${id} (evil\\u001b[8m) was dead`);
      expect(list!.stdout).toContain('evil\\u001b[8m');
      expect(list!.stdout).toContain('boom \\u001b[2J\\u001b]0;owned\\u0007 \\u009b31m');
      expect(show!.stdout).toContain('\\u202etxt.exe');
      expect(show!.stdout).toContain('\\u001b]0;owned\\u0007');
      // In JSON the escape is the same string: it parses to what was stored.
      const parsed = JSON.parse(shownJson!.stdout) as {
        job: { jobType: string; lastError: string; payload: unknown };
      };
      expect(parsed.job).toMatchObject({
        jobType: 'evil\u001b[8m',
        lastError: error,
        payload: { note: error },
      });
    } finally {
      await db.pool.query('DELETE FROM skiplock.jobs WHERE id = $1', [id]);
    }
  });

  it('shows what a waiting job waits behind: the jobs holding its key, and lists them by key', async () => {
    const limited = { concurrencyKey: 'tenant-9', concurrencyLimit: 1 } as const;
    // The holder sits in a queue no worker serves; the waiter's job page named neither it nor why.
    const holder = (
      await client.enqueue(sendEmail, { to: 'h9@example.com' }, { ...limited, queue: 'retired' })
    ).id;
    const waiter = (await client.enqueue(sendEmail, { to: 'w9@example.com' }, limited)).id;
    // Admitted into the key's one slot, as a worker's admission pass would.
    await db.pool.query(`UPDATE skiplock.jobs SET status = 'pending' WHERE id = $1`, [holder]);
    expect((await statusOf(waiter))!.status).toBe('waiting');
    const shown = await runInProcess(['jobs', 'show', waiter], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(
      new RegExp(`waits behind\\s+job ${holder} pending in queue retired\\n`),
    );
    const json = await runInProcess(['jobs', 'show', waiter, '--json'], env);
    expect(JSON.parse(json.stdout).keyHolders).toEqual([
      {
        id: holder,
        queue: 'retired',
        jobType: 'send-email',
        status: 'pending',
        leaseExpiresAt: null,
      },
    ]);
    const listed = await runInProcess(
      ['jobs', 'list', '--concurrency-key', 'tenant-9', '--json'],
      env,
    );
    expect(listed.code, listed.stderr).toBe(0);
    expect((JSON.parse(listed.stdout) as { jobs: { id: string }[] }).jobs.map((j) => j.id)).toEqual(
      [waiter, holder],
    );
    // The holder's run stopped renewing its lease: said so, and the holder may be cancelled.
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'processing', attempts = 1, locked_by = 'host:9:w',
         locked_at = now(), lease_expires_at = now() - interval '5 minutes' WHERE id = $1`,
      [holder],
    );
    expect((await runInProcess(['jobs', 'show', waiter], env)).stdout).toMatch(
      new RegExp(
        `job ${holder} processing in queue retired \\(lease expired 5m ago: its worker is gone or stuck\\)`,
      ),
    );
    // A holder stopped with --running still holds the slot until its handler returns.
    await db.pool.query(
      `UPDATE skiplock.jobs SET lease_expires_at = now() + interval '10 minutes' WHERE id = $1`,
      [holder],
    );
    const stopped = await runInProcess(['jobs', 'cancel', holder, '--running'], env);
    expect(stopped.code, stopped.stderr).toBe(0);
    expect((await statusOf(waiter))!.status).toBe('waiting');
    expect((await runInProcess(['jobs', 'show', waiter], env)).stdout).toMatch(
      new RegExp(
        `job ${holder} cancelled in queue retired \\(stopped; its handler has not returned: holds the slot until it does, or until its lease ends in (9m|10m)`,
      ),
    );
    // Its worker gone, the lease runs out: the slot is free, and the waiter admitted.
    await db.pool.query(
      `UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`,
      [holder],
    );
    const retried = await runInProcess(['jobs', 'retry', waiter], env);
    expect(retried.code, retried.stderr).toBe(0);
    expect((await statusOf(waiter))!.status).toBe('pending');
    expect((await runInProcess(['jobs', 'list', '--concurrency-key', ''], env)).code).toBe(2);
  });

  it('names every word of a timeline event: a job waiting for a concurrency slot "waits for slot"', async () => {
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO skiplock.jobs (queue, job_type, status, concurrency_key, concurrency_limit)
       VALUES ('slots', 'sync', 'waiting', 'tenant-7', 1) RETURNING id::text`,
    );
    const id = rows[0]!.id;
    try {
      const shown = await runInProcess(['jobs', 'show', id], env);
      expect(shown.code, shown.stderr).toBe(0);
      // Before: "waits for_slot" (only the first underscore was replaced).
      expect(shown.stdout).toMatch(/waits for slot\s+attempt 1 concurrency key tenant-7, limit 1/);
    } finally {
      await db.pool.query('DELETE FROM skiplock.jobs WHERE id = $1', [id]);
    }
  });

  it('says a delayed waiting job with no key holders waits until it is due, not for an admission pass', async () => {
    const delayed = (
      await client.enqueue(
        sendEmail,
        { to: 'later@example.com' },
        { concurrencyKey: 'tenant-later', concurrencyLimit: 1, delayMs: 3_600_000 },
      )
    ).id;
    expect((await statusOf(delayed))!.status).toBe('waiting');
    const shown = await runInProcess(['jobs', 'show', delayed], env);
    // Before: "the next admission pass admits it", which it would not for an hour.
    expect(shown.stdout).toMatch(/waits behind\s+not due until \S+ \(in (59m|1h)/);
  });
});
