/**
 * `pnpm demo`: billing sagas on real worker processes against a real PostgreSQL, with declines,
 * transient faults, late confirmations and (with --kill-workers) a worker killed mid-run; ends with
 * a summary and exits 0 only when every saga ended completed or compensated and the money adds up.
 */
import { closeSync, openSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { pino } from 'pino';
import { seedCustomers } from '../customers.js';
import { migrateBilling } from '../migrate.js';
import { createBillingSystem, type BillingSystem } from '../system.js';
import type { WorkerConfig } from '../worker/config.js';
import { openDemoDatabase } from './database.js';
import { FlagError, parseDemoFlags, usage, type DemoFlags } from './flags.js';
import { produceInvoices } from './produce.js';
import { createProgress } from './progress.js';
import { collectReport, countSagas } from './report.js';
import { formatSummary, judge, type RunFacts } from './summary.js';
import { busiestWorkerPid } from './busiest.js';
import { createFleet, type WorkerFleet } from './workers.js';

const POLL_MS = 200;

async function run(flags: DemoFlags, interrupted: AbortSignal): Promise<number> {
  const out = process.stdout;
  const say = (line: string) => out.write(`${line}\n`);
  const pct = (r: number) => `${Math.round(r * 100)}%`;
  say(
    `Billing demo: ${flags.count} sagas on ${flags.workers} worker processes ` +
      `(declines ${pct(flags['decline-rate'])}, transient faults ${pct(flags['transient-rate'])}, ` +
      `late confirmations ${pct(flags['late-confirm-rate'])}${flags['kill-workers'] ? ', one worker killed with SIGKILL mid-run' : ''})`,
  );
  say(
    process.env.DATABASE_URL
      ? 'Using the PostgreSQL server in DATABASE_URL…'
      : 'Starting a throwaway PostgreSQL…',
  );
  const db = await openDemoDatabase({ keep: flags.keep });
  const logPath = join(tmpdir(), `${db.name}.log`);
  const logFd = openSync(logPath, 'a');
  const logger = pino(
    { name: 'billing-demo', level: 'warn' },
    pino.destination({ fd: logFd, sync: true }),
  );
  const pool = new pg.Pool({ connectionString: db.url, max: 12, application_name: 'billing-demo' });
  pool.on('error', (error) =>
    logger.warn({ reason: 'db_error', err: error.message }, 'idle connection error'),
  );
  let fleet: WorkerFleet | null = null;
  let system: BillingSystem | null = null;
  const stopProducing = new AbortController();
  try {
    say(`PostgreSQL from ${db.source}; fresh database ${db.name}`);
    await migrateBilling(pool, logger);
    const customers = await seedCustomers(pool, { count: flags.customers, maxCreditCents: 20_000 });
    const config: WorkerConfig = {
      concurrency: flags.concurrency,
      declineRate: flags['decline-rate'],
      transientRate: flags['transient-rate'],
      lateConfirmRate: flags['late-confirm-rate'],
      providerLatencyMs: 20,
      webhookDelayMs: 400,
      confirmTimeoutMs: 15_000,
      logLevel: 'info',
    };
    // This process only starts sagas and reads them; the workers run them.
    system = createBillingSystem({
      pool,
      logger,
      rates: { declineRate: 0, transientRate: 0, lateConfirmRate: 0 },
      confirmTimeoutMs: config.confirmTimeoutMs,
    });
    fleet = createFleet({ databaseUrl: db.url, config, logFd, logPath });
    say(`Starting ${flags.workers} worker processes…`);
    await fleet.start(flags.workers);

    const deadline = Date.now() + flags['deadline-seconds'] * 1000;
    const production = produceInvoices(system, customers, flags.count, {
      signal: stopProducing.signal,
    });
    let produced = false;
    let producerError: unknown = null;
    production.then(
      () => (produced = true),
      (error: unknown) => (producerError = error),
    );
    const progress = createProgress(out);
    const kills: RunFacts['kills'] = [];
    let killing: Promise<void> | null = null;
    let deadlineHit = false;
    for (;;) {
      const counts = await countSagas(pool);
      const finished = counts.completed + counts.compensated + counts.failed + counts.cancelled;
      progress.update({
        total: flags.count,
        completed: counts.completed,
        compensated: counts.compensated,
        failed: counts.failed + counts.cancelled,
        inFlight: counts.unfinished,
        workers: fleet.size,
        note: kills.length > 0 ? `killed pid ${kills[0]!.killedPid}` : undefined,
      });
      if (producerError) throw producerError;
      if (produced && counts.unfinished === 0 && finished >= flags.count) break;
      if (interrupted.aborted) break;
      if (Date.now() > deadline) {
        deadlineHit = true;
        break;
      }
      if (flags['kill-workers'] && !killing && finished >= Math.ceil(flags.count / 3)) {
        const atFinished = finished;
        const currentFleet = fleet;
        killing = busiestWorkerPid(pool)
          .then((pid) => currentFleet.killOneAndReplace(pid ?? undefined))
          .then((kill) => void kills.push({ ...kill, atFinished }));
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
    progress.done();
    stopProducing.abort();
    await production.catch(() => {});
    await killing;
    await fleet.stop();
    if (interrupted.aborted) {
      say('Interrupted; cleaning up.');
      return 130;
    }
    const report = await collectReport(pool, system.runtime);
    const facts: RunFacts = {
      workers: flags.workers,
      databaseSource: db.source,
      kills,
      unexpectedExits: fleet.unexpectedExits.length,
      deadlineHit,
      workerLog: logPath,
    };
    const verdict = judge(report, facts, flags.count);
    out.write(
      formatSummary(report, facts, verdict, { color: Boolean(out.isTTY) && !process.env.NO_COLOR }),
    );
    return verdict.ok ? 0 : 1;
  } finally {
    stopProducing.abort();
    await fleet?.stop();
    await system?.runtime.close();
    await pool.end();
    await db.close();
    // Last: once closed, the fd number is free for the next socket, and a late line from the
    // logger would be written into that socket (PostgreSQL saw it as "invalid frontend message
    // type 123", the `{` of a JSON log line, when the number went to the DROP DATABASE connection).
    logger.level = 'silent';
    closeSync(logFd);
    if (flags.keep) {
      say(
        db.source === 'DATABASE_URL'
          ? `Kept database ${db.name} on the DATABASE_URL server.`
          : '--keep only keeps a database on your own server (DATABASE_URL); the throwaway one is gone.',
      );
    }
  }
}

async function main(): Promise<number> {
  let flags: DemoFlags | null;
  try {
    flags = parseDemoFlags(process.argv.slice(2));
  } catch (error) {
    if (!(error instanceof FlagError)) throw error;
    process.stderr.write(`pnpm demo: ${error.message}\nRun \`pnpm demo --help\` for the flags.\n`);
    return 2;
  }
  if (!flags) {
    process.stdout.write(`${usage}\n`);
    return 0;
  }
  const interrupt = new AbortController();
  process.once('SIGINT', () => interrupt.abort());
  process.once('SIGTERM', () => interrupt.abort());
  return run(flags, interrupt.signal);
}

function describeFailure(error: unknown): string {
  const code = (error as { code?: string }).code;
  const message = error instanceof Error ? error.message : String(error);
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === '28P01' || code === '3D000') {
    return `cannot use the database (${message}); check DATABASE_URL, or unset it to use a throwaway PostgreSQL`;
  }
  if (code === '42501')
    return `${message}; the DATABASE_URL user must be allowed to create databases`;
  return error instanceof Error ? (error.stack ?? message) : message;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`pnpm demo failed: ${describeFailure(error)}\n`);
    process.exit(1);
  },
);
