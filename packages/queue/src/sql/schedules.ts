import { sql } from 'drizzle-orm';
import { lockTimeoutFor, SCHEDULE_LOCK_CLASS } from './lock.js';

export interface ScheduleRow {
  name: string;
  cron: string;
  timezone: string;
  job_type: string;
  queue: string;
  paused: boolean;
  last_tick_at: Date;
  /** See `schedules.onTimeMs` in the schema. */
  on_time_ms: number | null;
  /** See `schedules.seenAt` in the schema. */
  seen_at: Date | null;
  /** Read by `selectSchedules` and `setSchedulePaused` only (see `seenReport`). */
  since_seen_ms?: number | null;
  created_at: Date;
  updated_at: Date;
}

/** The row's definition, in the form `seen_for` keeps. */
const DEFINITION = 'jsonb_build_array(cron, timezone, job_type, queue)';
const definition = sql.raw(DEFINITION);
/** `seen_at` when it was moved for the recorded definition, else null. */
const seenAt = sql.raw(`CASE WHEN seen_for = ${DEFINITION} THEN seen_at END AS seen_at`);
/**
 * For operators' reads: also how long ago, in the database's clock, a scheduler running the
 * recorded definition was last seen or the schedule last changed (null when none was seen).
 */
const seenReport = sql.raw(
  `CASE WHEN seen_for = ${DEFINITION} THEN seen_at END AS seen_at,
   CASE WHEN seen_for = ${DEFINITION}
        -- Never below 0: a mark in the future (a pass given a later now) reads as just seen.
        THEN greatest(0, extract(epoch FROM clock_timestamp() - greatest(seen_at, updated_at)) * 1000)::float8
   END AS since_seen_ms`,
);

/** A schedule's definition as a scheduler records it, seen running it at `now`. */
export interface RecordedSchedule {
  name: string;
  cron: string;
  timezone: string;
  jobType: string;
  queue: string;
  now: Date;
  onTimeMs: number;
}

const insertInto = sql`
    INSERT INTO skiplock.schedules (name, cron, timezone, job_type, queue, last_tick_at, on_time_ms,
                                    seen_at, seen_for)`;
const recordedValues = (p: RecordedSchedule) => sql`
    ${p.name}, ${p.cron}, ${p.timezone}, ${p.jobType}, ${p.queue}, ${p.now.toISOString()}::timestamptz,
    ${p.onTimeMs}::int, ${p.now.toISOString()}::timestamptz,
    jsonb_build_array(${p.cron}::text, ${p.timezone}::text, ${p.jobType}::text, ${p.queue}::text)`;

/**
 * Records a schedule again whose row is gone (removed by an operator while a scheduler still
 * defines it), as new: from `now`, active. Returns no row when the row is there, paused or held
 * by another scheduler, or another scheduler is recording it again now, without waiting for
 * either: the insert is tried only when the statement's snapshot holds no committed row of the
 * name and this transaction gets the schedule's advisory lock. An insert that meets a row another
 * transaction has written and not committed waits for that transaction: a plain `ON CONFLICT DO
 * NOTHING` did so behind a held row, and the snapshot check alone behind another scheduler's
 * uncommitted re-record (2.8 s for a pass behind one whose commit was held 3 s); every schedule
 * after it in the pass waited too (both found in review).
 */
export function insertMissingSchedule(p: RecordedSchedule) {
  return sql`
    ${insertInto}
    SELECT ${recordedValues(p)}
    WHERE NOT EXISTS (SELECT FROM skiplock.schedules WHERE name = ${p.name})
      AND pg_try_advisory_xact_lock(${SCHEDULE_LOCK_CLASS}, hashtext(${p.name}))
    ON CONFLICT (name) DO NOTHING
    RETURNING last_tick_at`;
}

/**
 * Records a schedule's definition. A new schedule starts at `now` (no ticks before it existed);
 * a changed one keeps its `last_tick_at`, so changing the cron does not replay the past, and
 * keeps `paused`, which belongs to the operator. The recording process is seen running it.
 *
 * With `waitMs`, a row another transaction holds is waited for up to that long (`lock_timeout`,
 * set for this statement's own transaction only: run it outside any transaction, as a starting
 * scheduler does), then the statement fails with SQLSTATE 55P03. The conflict's update locks the
 * row even when its WHERE is false, so with no bound a scheduler's first pass waited behind a
 * stalled holder (a paused VM's open pass) for as long as that lasted, and every schedule with it
 * (found by an audit). The uncorrelated subquery runs once, before the conflict is met.
 */
export function upsertSchedule(p: RecordedSchedule, waitMs: number | null = null) {
  const lockWait = waitMs === null ? sql`` : sql`WHERE ${lockTimeoutFor(waitMs)}`;
  return sql`
    ${insertInto}
    SELECT ${recordedValues(p)} ${lockWait}
    ON CONFLICT (name) DO UPDATE
    SET cron = excluded.cron, timezone = excluded.timezone, job_type = excluded.job_type,
        queue = excluded.queue, on_time_ms = excluded.on_time_ms, updated_at = now(),
        seen_at = excluded.seen_at, seen_for = excluded.seen_for,
        -- A new cron or time zone starts at the change, as a new schedule does: from the old
        -- cron's last tick, the new one's ticks before the change counted as missed (a daily
        -- schedule made hourly at 10:30 enqueued 01:00 to 10:00 under a day's catch-up).
        last_tick_at = CASE
          WHEN (schedules.cron, schedules.timezone) IS DISTINCT FROM (excluded.cron, excluded.timezone)
          THEN greatest(schedules.last_tick_at, excluded.last_tick_at)
          ELSE schedules.last_tick_at END
    WHERE (schedules.cron, schedules.timezone, schedules.job_type, schedules.queue)
          IS DISTINCT FROM (excluded.cron, excluded.timezone, excluded.job_type, excluded.queue)
    RETURNING last_tick_at`;
}

/** What `lockSchedule` reads of a schedule. */
export type LockedScheduleRow = Pick<
  ScheduleRow,
  | 'cron'
  | 'timezone'
  | 'job_type'
  | 'queue'
  | 'last_tick_at'
  | 'on_time_ms'
  | 'updated_at'
  | 'seen_at'
>;

/**
 * Locks a schedule that is not paused, with the definition recorded for it and when a scheduler
 * running that definition was last seen (null when none was, or only for another definition);
 * another scheduler holding it is skipped, not waited for. A paused row is not locked: locking
 * it took a transaction id and WAL per paused schedule per pass (1,000 ids and 102 KB for 50
 * passes over 20 paused schedules, against none; found in review).
 */
export function lockSchedule(name: string) {
  return sql`
    SELECT name, cron, timezone, job_type, queue, last_tick_at, on_time_ms, updated_at,
           ${seenAt}
    FROM skiplock.schedules
    WHERE name = ${name} AND NOT paused
    FOR UPDATE SKIP LOCKED`;
}

/**
 * Moves the schedule past the ticks just handled, never backwards, and records that a scheduler
 * running its recorded definition was seen at `now`, with its on-time window when that is the
 * longest yet (in the same row write). Run by such a scheduler, holding the row's lock. The
 * longest, not the last: two schedulers of one definition with the default 1 s interval and
 * with 300 s each record theirs, and the slow one, never due to mark the row while the fast one
 * does, would be judged by the fast one's window once the fast one left, and taken over while
 * it ran (found in review).
 */
export function advanceSchedule(name: string, lastTickAt: Date, onTimeMs: number, now: Date) {
  return sql`
    UPDATE skiplock.schedules
    SET last_tick_at = greatest(last_tick_at, ${lastTickAt.toISOString()}::timestamptz),
        on_time_ms = greatest(on_time_ms, ${onTimeMs}::int), updated_at = now(),
        seen_at = ${now.toISOString()}::timestamptz, seen_for = ${definition}
    WHERE name = ${name}`;
}

/**
 * Records that a scheduler running the recorded definition passed over the schedule at `now`,
 * with its on-time window as `advanceSchedule` does, and nothing else: `updated_at` keeps meaning
 * the last change or tick. Run, as `advanceSchedule`, under the row's lock by such a scheduler.
 */
export function touchSchedule(name: string, onTimeMs: number, now: Date) {
  return sql`
    UPDATE skiplock.schedules
    SET seen_at = ${now.toISOString()}::timestamptz, seen_for = ${definition},
        on_time_ms = greatest(on_time_ms, ${onTimeMs}::int)
    WHERE name = ${name}`;
}

export function selectSchedules() {
  return sql`
    SELECT name, cron, timezone, job_type, queue, paused, last_tick_at, created_at, updated_at,
           on_time_ms, ${seenReport}
    FROM skiplock.schedules ORDER BY name`;
}

/**
 * Locks a schedule, as `selectSchedules` reads it, and removes it when `force` is set or it is
 * `not_seen` (`scheduleRunState`'s rule: not paused, and no scheduler running the recorded
 * definition seen for twice the row's on-time window, `defaultOnTimeMs` when it has none). One
 * row always: the schedule's columns (null when it was not locked), whether it went (`removed`),
 * and whether it is there but was held by another transaction (`held`).
 *
 * With `waitMs` the statement waits in line for a held row for up to that long each time it
 * waits (`lock_timeout`, set for this statement's own transaction only: run it outside any
 * transaction), then fails with SQLSTATE 55P03. A waiter holds the row's tuple lock, so the
 * schedulers' `SKIP LOCKED` passes skip the row from then and the removal has it next (a pass
 * that updated the row leaves a newer version, which the removal locks after following the
 * update chain; a pass starting in that instant can come first, and is waited for in turn).
 * Polling with `SKIP LOCKED` found it held on every try for 2 s while 4 processes ran passes back
 * to back (a CI failure of the crash test). Without `waitMs` a held row is skipped and reported as
 * `held`, for a caller's transaction, whose `lock_timeout` this must not change.
 */
export function removeScheduleRow(
  name: string,
  force: boolean,
  defaultOnTimeMs: number,
  waitMs: number | null,
) {
  // The uncorrelated subquery runs once, before the row is fetched and so before its lock is
  // waited for (the schedule.test.ts removal tests fail if it ran after).
  const lockWait =
    waitMs === null
      ? sql`FOR UPDATE SKIP LOCKED`
      : sql`AND ${lockTimeoutFor(waitMs)}
      FOR UPDATE`;
  return sql`
    WITH target AS (
      SELECT name, cron, timezone, job_type, queue, paused, last_tick_at, created_at, updated_at,
             on_time_ms, ${seenReport}
      FROM skiplock.schedules WHERE name = ${name}
      ${lockWait}
    ), removed AS (
      DELETE FROM skiplock.schedules s USING target t
      WHERE s.name = t.name
        AND (${force}::boolean
             OR (NOT t.paused
                 AND t.since_seen_ms > 2 * coalesce(t.on_time_ms, ${defaultOnTimeMs}::int)))
      RETURNING s.name
    )
    SELECT t.*, EXISTS (SELECT FROM removed) AS removed,
           t.name IS NULL AND EXISTS (SELECT FROM skiplock.schedules WHERE name = ${name}) AS held
    FROM (SELECT) AS one LEFT JOIN target t ON true`;
}

/**
 * Pauses or resumes; on resume the schedule's catch-up policy decides about the missed ticks.
 * With `waitMs`, a row another transaction holds is waited for up to that long (`lock_timeout`
 * for this statement's own transaction, as `removeScheduleRow` does), then SQLSTATE 55P03.
 */
export function setSchedulePaused(name: string, paused: boolean, waitMs: number | null = null) {
  const lockWait = waitMs === null ? sql`` : sql`AND ${lockTimeoutFor(waitMs)}`;
  return sql`
    UPDATE skiplock.schedules SET paused = ${paused}, updated_at = now()
    WHERE name = ${name} ${lockWait}
    RETURNING name, cron, timezone, job_type, queue, paused, last_tick_at, created_at, updated_at,
              on_time_ms, ${seenReport}`;
}

export const databaseNow = () => sql`SELECT clock_timestamp() AS now`;
