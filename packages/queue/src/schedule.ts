import { Cron } from 'croner';
import { parseConfig, queueName } from './config.js';
import type { AnyJobDefinition } from './define.js';
import { ConfigError } from './errors.js';
import { z } from 'zod';

/**
 * What a scheduler does with ticks it finds already past (the process was down, the schedule
 * was paused): `'skip'` enqueues only ticks at most a minute late; `'latest'` enqueues those too
 * and, when none is, the most recent missed tick once, skipping the rest; `{ withinMs }` enqueues
 * every missed tick no older than that (at most `MAX_TICKS_PER_PASS` per pass, oldest first).
 */
export type CatchUp = 'skip' | 'latest' | { withinMs: number };

/** A tick more than this late (or 1.5 scheduler intervals, when longer) is missed under `'skip'`. */
export const ON_TIME_MS = 60_000;
/** Bounds the work and the transaction of one schedule's pass. */
export const MAX_TICKS_PER_PASS = 1_000;

export interface ScheduleDefinition<P = unknown> {
  readonly name: string;
  readonly cron: string;
  readonly timezone: string;
  readonly job: AnyJobDefinition;
  /** The payload of the tick's job: a value, or built from the tick's time. */
  readonly payload: (tick: Date) => P;
  readonly catchUp: CatchUp;
  /** Ticks after `after`, up to and including `until`, ascending (at most `limit`). */
  ticks(after: Date, until: Date, limit: number): Date[];
  /** The latest tick at or before `until`, or null. */
  latest(until: Date): Date | null;
}

export interface ScheduleInput<P> {
  /** Unique per schedule; its ticks' idempotency keys are `schedule:<name>:<tick ISO time>`. */
  name: string;
  /** 5 fields (minute precision) or 6 (seconds first), as croner reads them. */
  cron: string;
  /** IANA time zone the cron is read in (default UTC). */
  timezone?: string;
  job: AnyJobDefinition;
  payload: P | ((tick: Date) => P);
  catchUp?: CatchUp;
}

const catchUpSchema = z.union([
  z.literal('skip'),
  z.literal('latest'),
  z
    .object({
      withinMs: z
        .number()
        .int()
        .min(1)
        .max(366 * 86_400_000),
    })
    .strict(),
]);

/**
 * A cron schedule: every tick enqueues one job of `job` with `payload`, exactly once however many
 * schedulers (workers with `schedules`) run it, with no leader. Daylight-saving changes follow
 * croner: a time that does not exist (spring forward) fires at the first valid time after it, a
 * time that happens twice (fall back) fires once, at its first occurrence.
 */
export function defineSchedule<P>(input: ScheduleInput<P>): ScheduleDefinition<P> {
  const name = parseConfig('schedule name', queueName, input?.name);
  const what = `schedule "${name}"`;
  if (typeof input.cron !== 'string' || input.cron.trim() === '') {
    throw new ConfigError(`invalid ${what}: cron: give a cron pattern such as "*/5 * * * *"`);
  }
  // croner also reads a 7th field, the year: a schedule of past years would never fire.
  const fields = input.cron.trim().split(/\s+/).length;
  if (!input.cron.trim().startsWith('@') && fields !== 5 && fields !== 6) {
    throw new ConfigError(
      `invalid ${what}: cron "${input.cron}" has ${fields} fields; give 5 (minute first) or 6 (seconds first)`,
    );
  }
  // A time zone that is not a string, or an empty one, croner reads as an offset in minutes or
  // as the host's own zone: ticks at another time than the one written, without a word.
  const timezone = input.timezone ?? 'UTC';
  if (typeof timezone !== 'string' || timezone.trim() === '') {
    throw new ConfigError(
      `invalid ${what}: timezone: give an IANA time zone name such as "Europe/Berlin" (default UTC)`,
    );
  }
  let cron: Cron;
  let next: Date | null;
  try {
    cron = new Cron(input.cron, cronOptions(timezone));
    // croner checks the time zone only when it computes a time.
    next = cron.nextRun(new Date());
  } catch (error) {
    throw new ConfigError(
      `invalid ${what}: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  if (next === null) {
    throw new ConfigError(`invalid ${what}: cron "${input.cron}" never fires`);
  }
  if (!input.job || typeof input.job.type !== 'string') {
    throw new ConfigError(`invalid ${what}: job: give a job definition made with defineJob`);
  }
  const job = input.job as {
    singletonMode?: unknown;
    singletonKey?: ((payload: unknown) => string | null) | null;
  };
  if (job.singletonKey && (job.singletonMode === 'replace' || job.singletonMode === 'throttle')) {
    // Each tick is enqueued under its own idempotency key, which these modes refuse beside a
    // singleton key: every pass failed (schedule_failed) and no tick was ever enqueued (found in
    // review). Refused only when the next tick's payload has a key: a key function may answer
    // null (no singleton), and such a schedule ran fine (found in review of that fix).
    let key: string | null = null;
    try {
      const sample =
        typeof input.payload === 'function'
          ? (input.payload as (tick: Date) => unknown)(next)
          : input.payload;
      key = job.singletonKey(sample);
    } catch {
      // A payload or key that throws here fails its pass at run time, where it is logged.
    }
    if (key !== null && key !== undefined) {
      throw new ConfigError(
        `invalid ${what}: job "${input.job.type}" has singletonMode "${String(job.singletonMode)}" and a singleton key for this schedule's payload, which cannot take the tick's idempotency key; use singletonMode "keep", or a key of null for these payloads`,
      );
    }
  }
  const catchUp = parseConfig(`${what} catchUp`, catchUpSchema, input.catchUp ?? 'skip');
  const payload = input.payload;
  return {
    name,
    cron: input.cron,
    timezone,
    job: input.job,
    payload: typeof payload === 'function' ? (payload as (tick: Date) => P) : () => payload as P,
    catchUp,
    ticks(after, until, limit) {
      const out: Date[] = [];
      let next = cron.nextRun(after);
      while (next && next.getTime() <= until.getTime() && out.length < limit) {
        out.push(next);
        next = cron.nextRun(next);
      }
      return out;
    },
    latest(until) {
      // previousRuns counts strictly before its reference; a tick exactly at `until` counts.
      return cron.previousRuns(1, new Date(until.getTime() + 1))[0] ?? null;
    },
  };
}

/**
 * croner's options for a schedule. `no-wildcard`: a pattern whose minute and hour fields hold no
 * `*` and no step is a fixed time, lists and ranges too (as Vixie cron has it), so a time of it a
 * spring-forward night skips runs at the first valid time after the gap, and one that repeats
 * runs once. With croner's default only single values were, and `15,45 2 * * *` did not run at
 * all that night (found by an audit).
 */
const cronOptions = (timezone: string) =>
  ({ timezone, paused: true, fixedTimeRule: 'no-wildcard' }) as const;

/**
 * Whether a recorded cron (another process's definition) had a tick after `after` and at or
 * before `until`; null when this process's croner cannot read it.
 */
export function hasTickBetween(
  cron: string,
  timezone: string,
  after: Date,
  until: Date,
): boolean | null {
  try {
    const next = new Cron(cron, cronOptions(timezone)).nextRun(after);
    return next !== null && next.getTime() <= until.getTime();
  } catch {
    return null;
  }
}
