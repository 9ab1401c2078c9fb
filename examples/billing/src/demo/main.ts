/**
 * `pnpm demo`: billing sagas on real worker processes against a real PostgreSQL, with declines,
 * transient faults, late confirmations and (with --kill-workers) a worker killed mid-run; ends with
 * a summary and exits 0 only when every saga ended completed or compensated and the money adds up.
 */
import { closeSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { pino } from 'pino';
import { seedCustomers } from '../customers.js';
import { migrateBilling } from '../migrate.js';
import { createBillingSystem, type BillingSystem } from '../system.js';
import { DEMO_RETRY, type WorkerConfig } from '../worker/config.js';
import { openDemoDatabase } from './database.js';
import { startEventPipeline, type EventPipeline } from './events.js';
import { describeFailure } from './failure.js';
import { FlagError, parseDemoFlags, usage, type DemoFlags } from './flags.js';
import { formatHeader } from './header.js';
import { produceInvoices } from './produce.js';
import { createProgress } from './progress.js';
import { collectReport, countSagas } from './report.js';
import { formatSummary, judge, type RunFacts } from './summary.js';
import { busiestWorkerPid } from './busiest.js';
import { createFleet, type WorkerFleet } from './workers.js';

const POLL_MS = 200;
// Once interrupted, the demo's database is thrown away: a worker's drain buys nothing, and with
// the whole process group interrupted (Ctrl-C) PostgreSQL is gone and a drain would only wait.
const INTERRUPTED_STOP_MS = 3_000;

async function run(flags: DemoFlags, interrupted: AbortSignal): Promise<number> {
  const cleanup: { error?: unknown } = {};
  const code = await runAndCleanUp(flags, interrupted, cleanup);
  // A failed clean-up fails a run that went well; an interrupted run expected it.
  if (cleanup.error !== undefined && !interrupted.aborted) throw cleanup.error;
  return code;
}

async function runAndCleanUp(
  flags: DemoFlags,
  interrupted: AbortSignal,
  cleanup: { error?: unknown },
): Promise<number> {
  const out = process.stdout;
  const say = (line: string) => out.write(`${line}\n`);
  for (const line of formatHeader(flags)) say(line);
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
  let events: EventPipeline | null = null;
  const stopProducing = new AbortController();
  // The workers' log is for looking into a failed run; a passing or interrupted one deletes it.
  let keepLog = true;
  const stopFleet = () => fleet?.stop(interrupted.aborted ? INTERRUPTED_STOP_MS : undefined);
  try {
    say(`PostgreSQL from ${db.source}; fresh database ${db.name}`);
    if (interrupted.aborted) return 0;
    await migrateBilling(pool, logger);
    const customers = await seedCustomers(pool, { count: flags.customers, maxCreditCents: 20_000 });
    // The sagas publish invoice events to the outbox in their steps' transactions; this relay
    // takes them from there to the broker.
    events = await startEventPipeline({ connectionString: db.url, runName: db.name, logger });
    say(`Relaying billing events to ${events.sink}`);
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
      retry: DEMO_RETRY,
    });
    if (interrupted.aborted) return 0;
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
      if (interrupted.aborted) break;
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
      if (Date.now() > deadline) {
        deadlineHit = true;
        break;
      }
      if (flags['kill-workers'] && !killing && finished >= Math.ceil(flags.count / 3)) {
        const atFinished = finished;
        const currentFleet = fleet;
        killing = busiestWorkerPid(pool)
          .then((pid) => currentFleet.killOneAndReplace(pid ?? undefined))
          .then((kill) => void kills.push({ ...kill, atFinished }))
          // Reported on the next tick, as a producer's failure is; never left unhandled.
          .catch((error: unknown) => void (producerError ??= error));
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
    progress.done();
    stopProducing.abort();
    await production.catch(() => {});
    await killing;
    await stopFleet();
    if (interrupted.aborted) return 0;
    const report = await collectReport(pool, system.runtime);
    const eventReport = await events.report(pool);
    const facts: RunFacts = {
      events: eventReport,
      workers: flags.workers,
      databaseSource: db.source,
      kills,
      unexpectedExits: fleet.unexpectedExits.length,
      deadlineHit,
      workerLog: logPath,
    };
    const verdict = judge(report, facts, flags.count);
    keepLog = !verdict.ok;
    if (!keepLog) facts.workerLog = null;
    out.write(
      formatSummary(report, facts, verdict, { color: Boolean(out.isTTY) && !process.env.NO_COLOR }),
    );
    return verdict.ok ? 0 : 1;
  } finally {
    // Every step runs even when one before it fails: an interrupted run may find PostgreSQL gone.
    for (const step of [
      () => stopProducing.abort(),
      stopFleet,
      () => system?.runtime.close(),
      () => events?.close(),
      () => pool.end(),
      () => db.close(),
    ]) {
      try {
        await step();
      } catch (error) {
        cleanup.error ??= error;
      }
    }
    // Last: once closed, the fd number is free for the next socket, and a late line from the
    // logger would be written into that socket (PostgreSQL saw it as "invalid frontend message
    // type 123", the `{` of a JSON log line, when the number went to the DROP DATABASE connection).
    logger.level = 'silent';
    closeSync(logFd);
    // Asked only now: PostgreSQL gets a Ctrl-C too, and its dropped connections can fail the run
    // before the demo's own SIGINT handler has run.
    if (!keepLog || interrupted.aborted) rmSync(logPath, { force: true });
    if (flags.keep) {
      say(
        db.source === 'DATABASE_URL'
          ? `Kept database ${db.name} on the DATABASE_URL server.`
          : '--keep keeps a database only on your own server (DATABASE_URL).',
      );
    }
  }
}

const SIGNAL_EXIT_CODES = { SIGINT: 130, SIGTERM: 143 } as const;
// What a shell reports for a process SIGPIPE ended, as `yes | head` does.
const CLOSED_OUTPUT_EXIT_CODE = 141;

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
  // The first signal starts the clean-up; later ones (a second Ctrl-C) are ignored rather than
  // ending the process half-way, which would leave workers, a server and its files behind.
  // `pnpm demo` runs this file with `node --import tsx`, not the tsx CLI: the CLI relays a
  // Ctrl-C and SIGKILLs its child unless the child acknowledges within about 60 ms, which a
  // busy demo on 2 cores missed in 1 of 3 early interrupts (no clean-up ran at all).
  const interrupt = new AbortController();
  let exitCode = 0;
  const stop = (code: number, notice: string | null) => {
    if (interrupt.signal.aborted) return;
    exitCode = code;
    if (notice !== null) process.stdout.write(notice);
    interrupt.abort();
  };
  const onSignal = (signal: keyof typeof SIGNAL_EXIT_CODES) =>
    stop(SIGNAL_EXIT_CODES[signal], '\nInterrupted; stopping the workers and cleaning up…\n');
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  // Whoever read the output has gone (`pnpm demo | head -3` once head has its lines): stop as a
  // Ctrl-C does, saying nothing more. Left unhandled, the write's EPIPE ended the process on the
  // spot, leaving the workers, the demo's database or an embedded server and its files behind.
  // Once the stream has failed, later writes to it are dropped without another error.
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') {
      process.stderr.write(`pnpm demo: cannot write its output: ${error.message}\n`);
    }
    stop(error.code === 'EPIPE' ? CLOSED_OUTPUT_EXIT_CODE : 1, null);
  });
  try {
    const code = await run(flags, interrupt.signal);
    return interrupt.signal.aborted ? exitCode : code;
  } catch (error) {
    // What broke was the interruption's doing (PostgreSQL got the Ctrl-C too); it is cleaned up.
    if (interrupt.signal.aborted) return exitCode;
    throw error;
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`pnpm demo failed: ${describeFailure(error)}\n`);
    process.exit(1);
  },
);
