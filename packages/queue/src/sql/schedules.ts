import { sql } from 'drizzle-orm';

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
  created_at: Date;
  updated_at: Date;
}

/**
 * Records a schedule's definition. A new schedule starts at `now` (no ticks before it existed);
 * a changed one keeps its `last_tick_at`, so changing the cron does not replay the past, and
 * keeps `paused`, which belongs to the operator.
 */
export function upsertSchedule(p: {
  name: string;
  cron: string;
  timezone: string;
  jobType: string;
  queue: string;
  now: Date;
  onTimeMs: number;
}) {
  return sql`
    INSERT INTO skiplock.schedules (name, cron, timezone, job_type, queue, last_tick_at, on_time_ms)
    VALUES (${p.name}, ${p.cron}, ${p.timezone}, ${p.jobType}, ${p.queue}, ${p.now.toISOString()}::timestamptz,
            ${p.onTimeMs}::int)
    ON CONFLICT (name) DO UPDATE
    SET cron = excluded.cron, timezone = excluded.timezone, job_type = excluded.job_type,
        queue = excluded.queue, on_time_ms = excluded.on_time_ms, updated_at = now(),
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

/**
 * Locks a schedule that is not paused, with the definition recorded for it; another scheduler
 * holding it is skipped, not waited for.
 */
export function lockSchedule(name: string) {
  return sql`
    SELECT name, cron, timezone, job_type, queue, last_tick_at, on_time_ms, updated_at
    FROM skiplock.schedules
    WHERE name = ${name} AND NOT paused
    FOR UPDATE SKIP LOCKED`;
}

/**
 * Moves the schedule past the ticks just handled, never backwards, and records the on-time window
 * of the scheduler that moved it (in the same row write).
 */
export function advanceSchedule(name: string, lastTickAt: Date, onTimeMs: number) {
  return sql`
    UPDATE skiplock.schedules
    SET last_tick_at = greatest(last_tick_at, ${lastTickAt.toISOString()}::timestamptz),
        on_time_ms = ${onTimeMs}::int, updated_at = now()
    WHERE name = ${name}`;
}

export function selectSchedules() {
  return sql`
    SELECT name, cron, timezone, job_type, queue, paused, last_tick_at, created_at, updated_at
    FROM skiplock.schedules ORDER BY name`;
}

/** Pauses or resumes; on resume the schedule's catch-up policy decides about the missed ticks. */
export function setSchedulePaused(name: string, paused: boolean) {
  return sql`
    UPDATE skiplock.schedules SET paused = ${paused}, updated_at = now()
    WHERE name = ${name}
    RETURNING name, cron, timezone, job_type, queue, paused, last_tick_at, created_at, updated_at`;
}

export const databaseNow = () => sql`SELECT clock_timestamp() AS now`;
