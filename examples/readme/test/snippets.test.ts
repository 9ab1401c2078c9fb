import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { createClient } from '@skiplock/queue';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { sendReceipt, workerOptions } from '../src/cli-jobs.js';

const tsxLoader = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const db = await useTestDatabase();
// The CLI from source, as packages/cli/test runs it (the installed binary is the consumer test's).
const cliMain = fileURLToPath(new URL('../../../packages/cli/src/main.ts', import.meta.url));

const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));

/**
 * Runs a README program as its own process, as a reader would, on this file's database. With
 * `asReadme`, through `pnpm example <file>` from the repository's root, as the README tells a
 * reader of this repository to, and without the tests' `NODE_OPTIONS`: the script must set the
 * source condition itself (run as the program's `Run:` line says, it found no built package).
 */
async function runProgram(name: string, { asReadme = false } = {}): Promise<string> {
  const script = fileURLToPath(new URL(`../src/${name}`, import.meta.url));
  const env = { ...process.env, DATABASE_URL: db.url, SKIPLOCK_LOG_LEVEL: 'warn' };
  const { stdout } = asReadme
    ? await promisify(execFile)('pnpm', ['-s', 'example', `examples/readme/src/${name}`], {
        env: { ...env, NODE_OPTIONS: '' },
        cwd: repoRoot,
        timeout: 60_000,
      })
    : await promisify(execFile)(process.execPath, ['--import', tsxLoader, script], {
        env,
        timeout: 60_000,
      });
  // pino's JSON lines are the library's logs; the program's own output is plain text.
  return stdout
    .split('\n')
    .filter((line) => line && !line.startsWith('{"level":'))
    .join('\n');
}

describe('the README programs', () => {
  it('queue.ts enqueues one job and a worker completes it, run with pnpm example as the README says', async () => {
    expect(await runProgram('queue.ts', { asReadme: true })).toMatch(
      /^job \d+: completed; sent inv_1 to ada@example\.com \(key .+\)$/,
    );
  });

  it('schedule.ts runs a schedule in a worker, each tick once, then pauses it', async () => {
    expect(await runProgram('schedule.ts')).toBe(
      [
        'ticks run: 3 or more, each once',
        'schedule usage-report (* * * * * *, Europe/Paris): paused',
      ].join('\n'),
    );
  });

  it('outbox.ts commits an order with its event and relays it to a verifying webhook receiver', async () => {
    expect(await runProgram('outbox.ts')).toMatch(
      /^webhook msg_\d+: \{"type":"order\.placed","timestamp":"[^"]+","data":\{"orderId":"ord_1","totalCents":4200\}\} \(verified\)$/,
    );
  });

  it('outbox-sink.ts relays through a sink of its own, one message of a key per pass', async () => {
    expect(await runProgram('outbox-sink.ts')).toMatch(
      /^delivered per pass: 1, 1, 0\nfile:\n\{"id":"\d+","topic":"sink\.demo","key":"a","payload":\{"step":1\}\}\n\{"id":"\d+","topic":"sink\.demo","key":"a","payload":\{"step":2\}\}$/,
    );
  });

  it('concurrency.ts runs one tenant two at a time without holding the other back', async () => {
    expect(await runProgram('concurrency.ts')).toBe('acme: at most 2 at once; globex: 1');
  });

  it('singleton.ts keeps one queued job per key, with the latest payload', async () => {
    expect(await runProgram('singleton.ts')).toBe(
      '3 edits, 1 queued job, with the latest edit: 10:02',
    );
  });

  it('rate-limit.ts spreads 12 starts of a tenant over three 500 ms windows', async () => {
    expect(await runProgram('rate-limit.ts')).toBe(
      '12 jobs ran, the last about 1 s or more after the first',
    );
  });

  it('dashboard.ts mounts the dashboard under a path of its own server', async () => {
    expect(await runProgram('dashboard.ts')).toBe('GET /admin/skiplock/: 200 Overview · skiplock');
  });

  it('saga-parallel.ts completes one checkout and undoes the completed branches of the declined one', async () => {
    expect(await runProgram('saga-parallel.ts')).toBe(
      [
        'saga checkout-1: completed (quote → prepare → charge; card completed, fraud completed, stock completed)',
        'saga checkout-2: compensated (quote → prepare → undo prepare → undo quote; card compensated, fraud completed, stock compensated)',
        'undone: checkout-2: quote, checkout-2: rsv_B7',
      ].join('\n'),
    );
  });

  it('saga.ts completes one saga and compensates the declined one', async () => {
    expect(await runProgram('saga.ts')).toBe(
      [
        'saga inv_1: completed (reserve → charge)',
        'saga inv_2: compensated (reserve → charge → undo reserve)',
        'reservations still held: 1',
      ].join('\n'),
    );
  });

  it('queue-in-transaction.ts commits an invoice with its job, and rolls both back together', async () => {
    expect(await runProgram('queue-in-transaction.ts')).toBe(
      [
        'invoice inv_3: rolled back (something after the enqueue failed)',
        'inv_1: invoice charged (ch_inv_1), job completed',
        'inv_2: invoice not charged, job dead (non_retryable: card declined)',
        'inv_3: no invoice, no job',
      ].join('\n'),
    );
  });

  it('saga-order.ts delivers the approval signal; one order completes, one is compensated', async () => {
    expect(await runProgram('saga-order.ts')).toBe(
      [
        'saga order-42: waiting at approved',
        'saga order-43: waiting at approved',
        'saga order-42: completed (reserve → record → approved → charge → ship)',
        'saga order-43: compensated (reserve → record → approved → charge → undo record → undo reserve)',
        'orders recorded: 42; reservations held: 1',
      ].join('\n'),
    );
  });

  it('cli-jobs.ts runs under skiplock worker, which exits 0 on SIGTERM', async () => {
    expect(sendReceipt.type).toBe('send-receipt');
    expect(workerOptions).toEqual({ concurrency: 20 });
    const client = createClient({ pool: db.pool });
    const { id } = await client.enqueue(sendReceipt, { invoiceId: 'inv_9' });

    const worker = spawn(
      process.execPath,
      [
        '--import',
        tsxLoader,
        cliMain,
        'worker',
        fileURLToPath(new URL('../src/cli-jobs.ts', import.meta.url)),
      ],
      { env: { ...process.env, DATABASE_URL: db.url, SKIPLOCK_LOG_LEVEL: 'info' } },
    );
    const exited = once(worker, 'close');
    let stdout = '';
    worker.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    try {
      await waitFor(async () => (await client.getJob(id))?.status === 'completed', {
        what: 'the worker to complete the job',
        timeoutMs: 30_000,
      });
    } finally {
      worker.kill('SIGTERM');
      await client.close();
    }
    const [code] = await exited;
    const logs = stdout
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(logs).toContainEqual(
      expect.objectContaining({ reason: 'jobs_loaded', jobTypes: ['send-receipt'] }),
    );
    expect(logs).toContainEqual(
      expect.objectContaining({
        reason: 'receipt_sent',
        invoiceId: 'inv_9',
        messageId: 'msg_inv_9',
      }),
    );
    expect(code).toBe(0);
  });
});
