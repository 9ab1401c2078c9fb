import type pg from 'pg';
import { z } from 'zod';
import { createClient, type Client } from './client.js';
import type { TracingOption } from './tracing.js';
import { parseConfig, queueName, rejectUnknownKeys } from './config.js';
import { readDatabaseClock } from './clock.js';
import { isPool, runSql, withTransaction, type Queryable } from './db.js';
import type { JobDefinition } from './define.js';
import { ConfigError, SkiplockError, loggableMessage } from './errors.js';
import { createDefaultLogger, type Logger } from './logger.js';
import { resolveMetrics, type MetricsOption, type QueueMetrics } from './metrics.js';
import {
  ON_TIME_MS,
  MAX_TICKS_PER_PASS,
  hasTickBetween,
  type ScheduleDefinition,
} from './schedule.js';
import { IntervalService } from './service.js';
import {
  advanceSchedule,
  insertMissingSchedule,
  lockSchedule,
  removeScheduleRow,
  selectSchedules,
  setSchedulePaused,
  touchSchedule,
  upsertSchedule,
  type LockedScheduleRow as LockedSchedule,
  type RecordedSchedule,
  type ScheduleRow,
} from './sql/schedules.js';

const schedulerOptionsSchema = z.object({
  /** How often due ticks are looked for; a tick is enqueued within about this long. */
  intervalMs: z.number().int().min(100).max(3_600_000).default(1_000),
});

export type SchedulerOptions = z.input<typeof schedulerOptionsSchema>;

export interface SchedulerResult {
  /** Jobs enqueued per schedule in this pass (a tick another scheduler enqueued counts 0). */
  enqueued: Record<string, number>;
  /**
   * Schedules another scheduler held, or paused, or not yet recorded by this process (their row
   * held past its wait: see `schedule_record_deferred`), so this pass left them alone.
   */
  skipped: string[];
  /** Schedules whose pass failed (logged with reason `schedule_failed`); retried next pass. */
  failed: string[];
}

export interface Scheduler {
  start(): void;
  stop(): Promise<void>;
  /** One pass over every schedule; `now` stands in for the database clock (tests). */
  runOnce(options?: { now?: Date }): Promise<SchedulerResult>;
  readonly metrics: QueueMetrics;
}

/**
 * Enqueues the due ticks of `schedules`, in every process that runs one, without a leader: each
 * schedule's row is locked with SKIP LOCKED for its pass, each tick's job carries the key
 * `schedule:<name>:<tick>` (so a tick is one job even if two passes raced past the lock, e.g.
 * after a crash), and `last_tick_at` moves on in the same transaction as the enqueues.
 */
export function createScheduler(
  options: SchedulerOptions & {
    pool: pg.Pool;
    schedules: readonly ScheduleDefinition[];
    logger?: Logger;
    metrics?: MetricsOption;
    client?: Client;
    /** Tracing of the ticks' enqueues when no `client` is given (see `ClientOptions.tracing`). */
    tracing?: TracingOption;
  },
): Scheduler {
  rejectUnknownKeys('scheduler options', options, [
    ...Object.keys(schedulerOptionsSchema.shape),
    'pool',
    'schedules',
    'logger',
    'metrics',
    'client',
    'tracing',
  ]);
  const { pool, schedules, logger = createDefaultLogger(), metrics: given } = options;
  const metrics = resolveMetrics(given);
  const config = parseConfig('scheduler options', schedulerOptionsSchema, {
    intervalMs: options.intervalMs,
  });
  const names = new Set<string>();
  for (const s of schedules) {
    if (names.has(s.name)) {
      throw new ConfigError(`invalid scheduler options: schedule "${s.name}" is listed twice`);
    }
    names.add(s.name);
  }
  const client = options.client ?? createClient({ pool, logger, tracing: options.tracing });
  // A client of an older copy of this package has no maxBulkSize: without this its ticks went
  // out as one empty bulk and the schedule moved past them (found in review).
  const bulkSize = (client as { maxBulkSize?: unknown }).maxBulkSize;
  const bulk =
    Number.isInteger(bulkSize) && (bulkSize as number) > 0 ? (bulkSize as number) : 1_000;
  /** Schedules this process has not recorded yet: not run until they are (see `recordOwn`). */
  const unrecorded = new Set(schedules.map((s) => s.name));
  /** Of those, the ones whose deferral was logged (once each). */
  const deferLogged = new Set<string>();
  // Under 'skip' a tick is on time when a pass of a running scheduler can reach it: a minute, or
  // longer with a slow interval (jittered up to 1.2x). With a fixed minute, an hourly schedule
  // passed every 5 minutes enqueued nothing in a day (found in review).
  const onTimeMs = Math.max(ON_TIME_MS, Math.ceil(config.intervalMs * 1.5));
  /** Rounds of one schedule's pass under 'skip' and 'latest' (see `runRounds`). */
  const maxRounds = Math.ceil(onTimeMs / 1_000 / MAX_TICKS_PER_PASS) + 1;

  const clock = () => readDatabaseClock(pool);

  /** The ticks of one schedule to enqueue now, and how far its pointer moves. */
  function due(s: ScheduleDefinition, last: Date, now: Date): { ticks: Date[]; through: Date } {
    const windowMs = typeof s.catchUp === 'string' ? onTimeMs : s.catchUp.withinMs;
    // Ticks come strictly after `from`: one exactly `windowMs` late is still inside the window.
    const from = new Date(Math.max(last.getTime(), now.getTime() - windowMs - 1));
    let ticks = s.ticks(from, now, MAX_TICKS_PER_PASS);
    if (s.catchUp === 'latest' && ticks.length === 0) {
      // On-time ticks run as under 'skip' (a pass finds several when the cron is faster than the
      // interval: taking only the newest dropped the others); with none, the newest missed one.
      const latest = s.latest(now);
      if (latest && latest > last) ticks = [latest];
    }
    // Everything up to now is handled, unless the pass stopped at its bound: then the next pass
    // goes on from the last tick enqueued.
    const through =
      ticks.length === MAX_TICKS_PER_PASS ? ticks[ticks.length - 1]! : (s.latest(now) ?? last);
    if (s.catchUp !== 'latest' && from > last && s.ticks(last, from, 1).length > 0) {
      logger.warn(
        { reason: 'schedule_ticks_missed', schedule: s.name, since: last.toISOString() },
        'schedule missed ticks while no scheduler ran it; skipped per its catchUp policy',
      );
    }
    return { ticks, through: through > last ? through : last };
  }

  const recorded = (s: ScheduleDefinition, now: Date): RecordedSchedule => ({
    name: s.name,
    cron: s.cron,
    timezone: s.timezone,
    jobType: s.job.type,
    queue: s.job.queue,
    now,
    onTimeMs,
  });
  const record = (s: ScheduleDefinition, now: Date, waitMs: number | null = null) =>
    upsertSchedule(recorded(s, now), waitMs);
  function failedPass(s: ScheduleDefinition, error: unknown): void {
    metrics.scheduleFailures.inc({ schedule: s.name });
    logger.error(
      { reason: 'schedule_failed', schedule: s.name, err: loggableMessage(error) },
      'schedule pass failed; its ticks stay due',
    );
  }

  /** Per schedule, the recorded definition this scheduler last logged it defers to. */
  const deferredTo = new Map<string, string>();

  /**
   * Whether this scheduler runs `s` on this pass, given the definition recorded for it: another
   * process (a newer deploy, or one started after this one) may have recorded another cron, time
   * zone, job type or queue, and then it alone runs the schedule, or both crons' ticks would be
   * enqueued. The recorded one is taken back only when no scheduler runs it: one of its ticks
   * since the row was last moved (by its scheduler, or a pause or resume) is late past the
   * on-time window: the longer of this scheduler's and the one that moved the row last (a
   * healthy scheduler with a longer `intervalMs` leaves its ticks due longer between passes, and
   * judged by this one's window it was taken over while it ran: found in review). A definition
   * whose ticks cannot tell (this process cannot read its cron or time zone, as after a rollback
   * to a version older than the cron's syntax, or none is due for long) is judged by when a
   * scheduler running it was last seen: taken back once none has been for twice that window
   * (a live one is seen at least every half window plus a pass). Not seen at all (recorded by a
   * version that does not record it), it is left alone. Returns the row's `last_tick_at` to go
   * on from, or null to leave it alone.
   */
  async function ownDefinition(
    tx: Queryable,
    s: ScheduleDefinition,
    row: LockedSchedule,
    now: Date,
  ): Promise<Date | null> {
    const recorded = [row.cron, row.timezone, row.job_type, row.queue].join('\u0000');
    if (recorded === [s.cron, s.timezone, s.job.type, s.job.queue].join('\u0000')) {
      deferredTo.delete(s.name);
      return row.last_tick_at;
    }
    const since = Math.max(row.last_tick_at.getTime(), row.updated_at.getTime());
    const windowMs = Math.max(onTimeMs, row.on_time_ms ?? 0);
    const late = now.getTime() - windowMs;
    const ticksLate =
      since < late && hasTickBetween(row.cron, row.timezone, new Date(since), new Date(late));
    // A pause or resume moves `updated_at` (the paused row is not locked, so not seen, meanwhile).
    const unseen =
      row.seen_at !== null &&
      Math.max(row.seen_at.getTime(), row.updated_at.getTime()) < now.getTime() - 2 * windowMs;
    const abandoned = ticksLate === true || unseen;
    const fields = {
      schedule: s.name,
      recorded: { cron: row.cron, timezone: row.timezone, jobType: row.job_type, queue: row.queue },
      own: { cron: s.cron, timezone: s.timezone, jobType: s.job.type, queue: s.job.queue },
    };
    if (!abandoned) {
      if (deferredTo.get(s.name) !== recorded) {
        deferredTo.set(s.name, recorded);
        logger.warn(
          { reason: 'schedule_definition_differs', ...fields },
          'another process recorded another definition of this schedule; it runs the schedule, this one leaves it alone',
        );
      }
      return null;
    }
    deferredTo.delete(s.name);
    const taken = (await runSql<Pick<ScheduleRow, 'last_tick_at'>>(tx, record(s, now))).rows[0];
    logger.warn(
      {
        reason: 'schedule_definition_taken_over',
        ...fields,
        why: ticksLate === true ? 'ticks_late' : 'not_seen',
      },
      'no scheduler runs the recorded definition of this schedule (its ticks are late, or none has been seen for twice the on-time window); this one records its own and runs it',
    );
    return taken?.last_tick_at ?? row.last_tick_at;
  }

  /**
   * No row to lock: it is paused, another scheduler holds it (both left alone), or an operator
   * removed the schedule while this process defines it (`removeSchedule`: forced, or one that
   * read not_seen while this process was stalled). Recorded again then, as a new schedule:
   * active, from now, so the ticks of the time it was gone are not enqueued. Before, a scheduler
   * skipped a missing row until it restarted, so a removed live schedule stopped firing. The
   * cost: one more statement, a read, for each paused or held schedule on each pass.
   */
  async function recordAgain(tx: Queryable, s: ScheduleDefinition, now: Date) {
    if ((await runSql(tx, insertMissingSchedule(recorded(s, now)))).rows.length === 0) return null;
    logger.warn(
      { reason: 'schedule_recorded_again', schedule: s.name },
      "the schedule's row was removed while this process defines it; recorded again, from now",
    );
    return 0;
  }

  /**
   * One round of a schedule's pass: how many ticks it enqueued, and whether it stopped at
   * `MAX_TICKS_PER_PASS` with more due; null when this scheduler leaves the schedule alone.
   */
  async function runSchedule(
    s: ScheduleDefinition,
    now: Date,
  ): Promise<{ enqueued: number; capped: boolean } | null> {
    return withTransaction(pool, async (tx: Queryable) => {
      const row = (await runSql<LockedSchedule>(tx, lockSchedule(s.name))).rows[0];
      if (!row) return (await recordAgain(tx, s, now)) === null ? null : NOTHING_ENQUEUED;
      const last = await ownDefinition(tx, s, row, now);
      if (last === null) return null;
      const { ticks, through } = due(s, last, now);
      let enqueued = 0;
      // A tick refused (its payload function throws, or the job refuses its payload or options)
      // while others of the pass are taken is skipped, and logged: it failed the whole pass, and
      // every tick after it waited until it fell out of the catch-up window, up to a year under
      // `{ withinMs }` (found by an audit). When every tick is refused (a payload bug, not a
      // date), the pass fails as before and its ticks stay due until the fix.
      const refusals: { tick: Date; error: unknown }[] = [];
      let taken = 0;
      const items: { tick: Date; item: { payload: never; idempotencyKey: string } }[] = [];
      for (const tick of ticks) {
        try {
          const payload = s.payload(tick) as never;
          items.push({
            tick,
            item: { payload, idempotencyKey: `schedule:${s.name}:${tick.toISOString()}` },
          });
        } catch (error) {
          refusals.push({ tick, error });
        }
      }
      const enqueue = async (these: typeof items) => {
        const results = await client.enqueueMany(
          s.job as unknown as JobDefinition<never>,
          these.map((t) => t.item),
          { tx },
        );
        taken += these.length;
        return results.filter((r) => r.inserted).length;
      };
      // In bulks the client accepts: a client given with a `maxBulkSize` below the ticks of one
      // pass (up to MAX_TICKS_PER_PASS on a catch-up) refused them all on every pass, and the
      // schedule never moved again (found in review).
      for (let from = 0; from < items.length; from += bulk) {
        const these = items.slice(from, from + bulk);
        try {
          enqueued += await enqueue(these);
        } catch (error) {
          if (!refusesTick(error)) throw error;
          // Refused before any statement was sent, so the transaction goes on: one by one, until
          // FALLBACK_REFUSALS in a row with none taken tell a payload bug (the pass fails) from a
          // date (each refused try is one more log line of the client's).
          let inARow = 0;
          for (const one of these) {
            if (taken === 0 && inARow >= FALLBACK_REFUSALS) throw error;
            try {
              enqueued += await enqueue([one]);
              inARow = 0;
            } catch (oneError) {
              if (!refusesTick(oneError)) throw oneError;
              refusals.push({ tick: one.tick, error: oneError });
              inARow += 1;
            }
          }
        }
      }
      if (refusals.length > 0) {
        refusals.sort((a, b) => a.tick.getTime() - b.tick.getTime());
        if (taken === 0) throw refusals[0]!.error;
        logger.error(
          {
            reason: 'schedule_ticks_refused',
            schedule: s.name,
            count: refusals.length,
            first: refusals[0]!.tick.toISOString(),
            err: loggableMessage(refusals[0]!.error),
          },
          "schedule skipped ticks whose payload function threw or whose payload the job refused; the pass's other ticks were enqueued",
        );
      }
      if (through > last) {
        await runSql(tx, advanceSchedule(s.name, through, onTimeMs, now));
      } else if (
        row.seen_at === null ||
        now.getTime() - row.seen_at.getTime() >= onTimeMs / 2 ||
        (row.on_time_ms ?? 0) < onTimeMs
      ) {
        // Seen at most every half window, so a process with another definition can tell this
        // one runs (see ownDefinition): one row write per schedule per 30 s by default; and at
        // once when the row's window is shorter than this scheduler's (see advanceSchedule).
        await runSql(tx, touchSchedule(s.name, onTimeMs, now));
      }
      return { enqueued, capped: ticks.length === MAX_TICKS_PER_PASS };
    });
  }

  /**
   * A schedule's pass: rounds of `runSchedule`. Under `'skip'` and `'latest'` the next pass
   * starts at the on-time window, so a round that stopped at its bound is followed by another at
   * once: ticks past it were dropped at the next pass (a seconds cron with `intervalMs` of an
   * hour ran about 1,000 of every 3,600; found by an audit). Bounded by the window's ticks at one
   * a second, croner's finest. Under `{ withinMs }` the next pass goes on from the bound.
   */
  async function runRounds(s: ScheduleDefinition, now: Date): Promise<number | null> {
    const rounds = typeof s.catchUp === 'string' ? maxRounds : 1;
    let total: number | null = null;
    for (let round = 0; round < rounds; round++) {
      let outcome: Awaited<ReturnType<typeof runSchedule>>;
      try {
        outcome = await runSchedule(s, now);
      } catch (error) {
        // The earlier rounds committed: counted, and the rest is due at the next pass.
        if (total === null) throw error;
        failedPass(s, error);
        break;
      }
      if (outcome === null) break;
      total = (total ?? 0) + outcome.enqueued;
      if (!outcome.capped) break;
    }
    return total;
  }

  /**
   * Records this process's definitions, each once: a new process's own definition wins (see
   * `ownDefinition`). A row another transaction holds past `RECORD_WAIT_MS` (a pass stalled
   * before its commit) is recorded at a later pass, and until then this process does not run
   * that schedule, which the holder blocks anyway; the others go on. Before, the first pass
   * waited for the holder with no bound, and every schedule of the process with it.
   */
  async function recordOwn(now: Date): Promise<void> {
    for (const s of schedules) {
      if (!unrecorded.has(s.name)) continue;
      try {
        await runSql(pool, record(s, now, RECORD_WAIT_MS));
      } catch (error) {
        if ((error as { code?: unknown } | null)?.code !== LOCK_NOT_AVAILABLE) throw error;
        if (!deferLogged.has(s.name)) {
          deferLogged.add(s.name);
          logger.warn(
            { reason: 'schedule_record_deferred', schedule: s.name },
            "another transaction holds the schedule's row; this process records and runs it once it is free",
          );
        }
        continue;
      }
      unrecorded.delete(s.name);
      deferLogged.delete(s.name);
    }
  }

  async function pass(passOptions: { now?: Date } = {}): Promise<SchedulerResult> {
    const now = passOptions.now ?? (await clock());
    if (unrecorded.size > 0) await recordOwn(now);
    const result: SchedulerResult = { enqueued: {}, skipped: [], failed: [] };
    for (const s of schedules) {
      if (unrecorded.has(s.name)) {
        result.skipped.push(s.name);
        continue;
      }
      let enqueued: number | null;
      try {
        enqueued = await runRounds(s, now);
      } catch (error) {
        // One schedule's bad payload or lost connection does not hold up the others.
        failedPass(s, error);
        result.failed.push(s.name);
        continue;
      }
      if (enqueued === null) {
        result.skipped.push(s.name);
        continue;
      }
      result.enqueued[s.name] = enqueued;
      if (enqueued > 0) {
        metrics.scheduleTicksEnqueued.inc({ schedule: s.name }, enqueued);
        logger.info(
          { reason: 'schedule_enqueued', schedule: s.name, jobs: enqueued },
          'schedule enqueued its due ticks',
        );
      }
    }
    return result;
  }

  const service = new IntervalService('scheduler', config.intervalMs, () => pass(), logger);
  return {
    start: () => service.start(),
    stop: () => service.stop(),
    runOnce: (o) => pass(o),
    metrics,
  };
}

export interface ScheduleState {
  name: string;
  cron: string;
  timezone: string;
  jobType: string;
  queue: string;
  paused: boolean;
  lastTickAt: Date;
  updatedAt: Date;
  /**
   * When a scheduler running this definition last passed over the schedule (about every 30 s
   * while one runs, by default; not while paused), or null when none has been seen since it was
   * recorded with this definition (or by a version that did not record it).
   */
  seenAt: Date | null;
  /**
   * The longest on-time window (ms) of the schedulers that ran this definition: one none has been
   * seen running for twice it is taken over by a process with another definition. Null when
   * written by a version that did not record it.
   */
  onTimeMs: number | null;
  /**
   * How long ago, in the database's clock, a scheduler running this definition was last seen or
   * the schedule last changed (a pause or resume): the age the takeover rule judges. Null when
   * `seenAt` is.
   */
  sinceSeenMs: number | null;
}

export type ScheduleRunState = 'paused' | 'active' | 'not_seen' | 'unknown';

/**
 * What an operator should read of a schedule: `paused`; `active`, a scheduler running its
 * recorded definition was seen within twice its on-time window (the row's, the longest of the
 * schedulers that ran it); `not_seen`, none was for longer: nothing may be enqueueing its ticks;
 * `unknown`, never marked seen (by a scheduler of a version before migration 0018). The takeover
 * rule of a process with another definition is close but not the same: it also takes over when
 * a tick is late past its window, and judges with its own window when that is longer.
 */
export function scheduleRunState(s: ScheduleState): ScheduleRunState {
  if (s.paused) return 'paused';
  if (s.sinceSeenMs === null) return 'unknown';
  return s.sinceSeenMs > 2 * (s.onTimeMs ?? ON_TIME_MS) ? 'not_seen' : 'active';
}

const toState = (r: ScheduleRow): ScheduleState => ({
  name: r.name,
  cron: r.cron,
  timezone: r.timezone,
  jobType: r.job_type,
  queue: r.queue,
  paused: r.paused,
  lastTickAt: r.last_tick_at,
  updatedAt: r.updated_at,
  seenAt: r.seen_at,
  onTimeMs: r.on_time_ms,
  sinceSeenMs: r.since_seen_ms ?? null,
});

/** Every schedule a scheduler has recorded, by name. */
export async function listSchedules(db: Queryable): Promise<ScheduleState[]> {
  return (await runSql<ScheduleRow>(db, selectSchedules())).rows.map(toState);
}

/**
 * Pauses a schedule: no scheduler enqueues its ticks until it is resumed; the ticks missed
 * meanwhile are then handled by its catch-up policy. Returns null for an unknown name.
 */
export async function pauseSchedule(db: Queryable, name: string): Promise<ScheduleState | null> {
  return setPaused(db, name, true);
}

export async function resumeSchedule(db: Queryable, name: string): Promise<ScheduleState | null> {
  return setPaused(db, name, false);
}

async function setPaused(
  db: Queryable,
  name: string,
  paused: boolean,
): Promise<ScheduleState | null> {
  if (!knownName(name)) return null;
  // On a pool, in a statement of its own: a row held by a pass stalled before its commit is
  // waited for REMOVE_HELD_MS, not for as long as the stall lasts (a dashboard request hung with
  // it; found by an audit). A caller's transaction keeps its own lock_timeout, and waits.
  const waitMs = isPool(db) ? REMOVE_HELD_MS : null;
  let row: ScheduleRow | undefined;
  try {
    row = (await runSql<ScheduleRow>(db, setSchedulePaused(name, paused, waitMs))).rows[0];
  } catch (error) {
    if ((error as { code?: unknown } | null)?.code !== LOCK_NOT_AVAILABLE) throw error;
    throw new SkiplockError(
      'schedule_busy',
      `schedule "${name}" was held by another transaction (a scheduler's pass, a pause, a resume or a removal) for ${REMOVE_HELD_MS / 1000} s; it was not ${paused ? 'paused' : 'resumed'}: try again`,
    );
  }
  return row ? toState(row) : null;
}

/** Whether a schedule can have this name; throws `invalid_name` for one that is not a string. */
function knownName(name: unknown): name is string {
  // A name left out went into the statement as nothing at all (a syntax error from PostgreSQL),
  // and one with NUL failed there as well.
  if (typeof name !== 'string') {
    throw new SkiplockError(
      'invalid_name',
      `schedule name must be a string, got ${name === undefined ? 'undefined' : JSON.stringify(name)}`,
    );
  }
  // No schedule can be named so (defineSchedule refuses it): an unknown name.
  return queueName.safeParse(name).success;
}

const removeOptionsSchema = z.strictObject({ force: z.boolean().default(false) });

export interface RemoveScheduleOptions {
  /**
   * Remove it whatever its state. A scheduler that still defines it records it again at its
   * next pass, active and from then (`schedule_recorded_again`), even one that was paused.
   */
  force?: boolean | undefined;
}

/**
 * Removes the row of a schedule no process defines any more: one taken out of the code keeps its
 * row, which reads `not_seen` (and counts in `skiplock_schedules{state="not_seen"}`) once nothing
 * marks it. Without `force` only a `not_seen` one is removed, judged in the same statement that
 * removes it, after any scheduler's pass holding the row (waited for in line on a pool, up to
 * 2 s for each pass it waits for; tried again for up to 2 s on a connection; then
 * `schedule_busy`: a pass stalled before its commit), and otherwise `schedule_in_use` is thrown
 * naming its state: an active one's scheduler would record it again at its next pass; a paused
 * one is not marked seen, so whether anything defines it cannot be told, and one that does would
 * record it again unpaused; an `unknown` one may run under a version before migration 0018.
 * Returns the schedule as it was removed, or null for an unknown name.
 */
export async function removeSchedule(
  db: Queryable,
  name: string,
  options: RemoveScheduleOptions = {},
): Promise<ScheduleState | null> {
  const { force } = parseConfig('removeSchedule options', removeOptionsSchema, options);
  if (!knownName(name)) return null;
  if (isPool(db)) {
    // Waits in line for a held row (see removeScheduleRow): polling could find it held on every
    // try while schedulers ran passes back to back.
    let row: RemovedRow;
    try {
      row = (
        await runSql<RemovedRow>(db, removeScheduleRow(name, force, ON_TIME_MS, REMOVE_HELD_MS))
      ).rows[0]!;
    } catch (error) {
      const code = (error as { code?: unknown } | null)?.code;
      if (code === LOCK_NOT_AVAILABLE) throw busy(name);
      if (code === SERIALIZATION_FAILURE) {
        // Only in a session whose default isolation is above READ COMMITTED: the row a pass
        // held was updated by it before the removal could lock it.
        throw new SkiplockError(
          'schedule_busy',
          `schedule "${name}" changed while the removal waited for it (the session's default isolation is above READ COMMITTED); nothing was removed: try again`,
        );
      }
      throw error;
    }
    // No row locked: there was none, or the transaction it waited for removed it.
    return row.name === null ? null : removed(row);
  }
  // A connection or a drizzle transaction may be the caller's transaction, whose lock_timeout
  // must not change: a held row is skipped and tried again.
  const deadline = Date.now() + REMOVE_HELD_MS;
  for (let pauseMs = 10; ; pauseMs = Math.min(2 * pauseMs, 100)) {
    const row = (await runSql<RemovedRow>(db, removeScheduleRow(name, force, ON_TIME_MS, null)))
      .rows[0]!;
    if (row.name !== null) return removed(row);
    if (!row.held) return null;
    if (Date.now() >= deadline) throw busy(name);
    await new Promise((resolve) => setTimeout(resolve, pauseMs));
  }
}

/** The schedule `removeScheduleRow` locked: as it was removed, or why it stays. */
function removed(row: RemovedRow): ScheduleState {
  const state = toState(row as ScheduleRow);
  if (row.removed) return state;
  throw new SkiplockError('schedule_in_use', inUse(state));
}

function busy(name: string): SkiplockError {
  return new SkiplockError(
    'schedule_busy',
    `schedule "${name}" was held by another transaction (a scheduler's pass, a pause, a resume or another removal) for ${REMOVE_HELD_MS / 1000} s; nothing was removed: try again (a long catch-up pass ends; a process stalled in its pass holds it until its connection ends)`,
  );
}

const NOTHING_ENQUEUED = { enqueued: 0, capped: false } as const;

/**
 * The client's refusals of one job's payload or options, made before it sends a statement: by
 * name, since the client may come from another copy of this package.
 */
function refusesTick(error: unknown): boolean {
  const { name, code } = (error ?? {}) as { name?: unknown; code?: unknown };
  return (
    ['InvalidPayloadError', 'PayloadTooLargeError', 'ConfigError'].includes(String(name)) ||
    ['invalid_payload', 'payload_too_large', 'invalid_config'].includes(String(code))
  );
}

/** Refusals in a row, none taken, after which a refused bulk's pass fails (see `runSchedule`). */
const FALLBACK_REFUSALS = 10;

/** PostgreSQL's SQLSTATE for a lock wait that ran past `lock_timeout`. */
const LOCK_NOT_AVAILABLE = '55P03';

/**
 * How long a starting scheduler waits for a schedule's row another transaction holds before it
 * goes on without it (see `recordOwn`): a pass holds it for milliseconds.
 */
const RECORD_WAIT_MS = 500;
const SERIALIZATION_FAILURE = '40001';

/**
 * How long `removeSchedule` waits while another transaction holds the row. A scheduler's pass
 * holds it for milliseconds; waiting with no bound hung for as long as a pass stalled before its
 * commit (a dashboard request among them).
 */
const REMOVE_HELD_MS = 2_000;

type RemovedRow = { [K in keyof ScheduleRow]: ScheduleRow[K] | null } & {
  removed: boolean;
  held: boolean;
};

/** Why `removeSchedule` without force leaves a schedule (`force` is the caller's to offer). */
function inUse(s: ScheduleState): string {
  switch (scheduleRunState(s)) {
    case 'paused':
      return `schedule "${s.name}" is paused: a paused schedule is not marked seen, so whether a process still defines it cannot be told, and one that does would record it again, unpaused, at its next pass`;
    case 'unknown':
      return `schedule "${s.name}" was never marked seen: a scheduler before migration 0018 may run it`;
    default:
      // The age counts from a pause or resume too (see sinceSeenMs): said so, since a schedule
      // resumed a second ago read as "seen 0 s ago" with no scheduler left (found in review).
      return `schedule "${s.name}" is active: a scheduler running it was seen, or it was paused or resumed, ${Math.round((s.sinceSeenMs ?? 0) / 1000)} s ago; a scheduler that runs it would record it again at its next pass. Stop the processes that define it and wait until it reads not_seen (twice its on-time window)`;
  }
}
