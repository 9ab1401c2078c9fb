import type pg from 'pg';
import { z } from 'zod';
import { parseConfig } from './config.js';
import { runSql } from './db.js';
import { errorMessage } from './errors.js';
import { createDefaultLogger, type Logger } from './logger.js';
import { resolveMetrics, type MetricsOption, type QueueMetrics } from './metrics.js';
import { IntervalService } from './service.js';
import { admitKeys, type AdmitRow } from './sql/admit.js';
import type { ClaimedRow } from './sql/claim.js';

const admitterOptionsSchema = z
  .object({
    /** How often a full pass looks for due waiting jobs (retries, delayed jobs, missed wake-ups). */
    intervalMs: z.number().int().min(50).max(3_600_000).default(1_000),
    /**
     * Keys one statement handles; a full pass runs up to `maxRounds` of them. Each key is an
     * advisory lock held to the statement's commit, and PostgreSQL's lock table is shared by
     * all sessions (64 × max_connections entries by default): 100 keys keeps eight workers
     * admitting at once well inside it.
     */
    maxKeys: z.number().int().min(1).max(200).default(100),
    maxRounds: z.number().int().min(1).max(1_000).default(50),
  })
  .strict();

export type AdmitterOptions = z.input<typeof admitterOptionsSchema>;

/**
 * A worker that takes admitted jobs itself: they come back leased to it, as a claim would return
 * them, and never go through NOTIFY and a claim. Only jobs of its queues and types, up to `room()`.
 */
export interface AdmitterLease {
  workerId: string;
  queues: readonly string[];
  types: readonly string[];
  /**
   * How many more jobs the worker can hold now (0 while it stops), promised to this admission
   * until `release` gives them back, just before what it leased is adopted.
   */
  room(): number;
  /** Takes what an admission leased; `sent` is `performance.now()` when its statement was sent. */
  adopt(rows: ClaimedRow[], sent: number): void;
  release?(promised: number): void;
}

export interface AdmitResult {
  admitted: number;
}

export interface Admitter {
  start(): void;
  stop(): Promise<void>;
  /**
   * One pass: with `keys`, admits those keys' waiting jobs, waiting for each key's lock; without,
   * a full pass over the keys that have waiting jobs, skipping any key another admitter holds.
   */
  runOnce(options?: { keys?: readonly string[] }): Promise<AdmitResult>;
  /** A job of `key` gave its slot back (it settled): admit the key's next job soon. */
  freed(key: string): void;
  /** Waiting jobs of `key` (`*`: of many keys) were inserted: admit them unless another does. */
  poke(key: string): void;
  /** `jobs_admitted_total` and `admit_failures_total`. */
  readonly metrics: QueueMetrics;
}

// Keys remembered between flushes. Past this, the rest are left to one full pass, which finds
// every key with waiting jobs anyway: memory stays bounded whatever the burst.
const MAX_REMEMBERED_KEYS = 10_000;

/**
 * Keeps the jobs of each concurrency key flowing through its slots. Admission itself is the
 * database function `skiplock.admit()`, which takes a key's lock, counts its admitted jobs and
 * makes waiting ones pending while slots are free, so any number of admitters on any number of
 * hosts can run it at once: this service only decides when. Three triggers:
 * - `freed(key)` after this worker settled a job of the key: its slot is free, so the next
 *   waiting job is admitted at once (the key's lock is waited for, so the admission cannot be
 *   missed). Settles that land together are admitted in one statement. With `lease`, admitted
 *   jobs this worker can run come back leased to it and start at once: no NOTIFY, no claim.
 * - `poke(key)` on the NOTIFY an insert of waiting jobs sends; a key whose lock is held is
 *   skipped, since its holder or the next pass admits it.
 * - a full pass every `intervalMs`: waiting jobs that became due (a retry's backoff, a delayed
 *   job), slots given back where no worker noticed (a lease expired, a job cancelled).
 */
export function createAdmitter(
  options: AdmitterOptions & {
    pool: pg.Pool;
    logger?: Logger;
    metrics?: MetricsOption;
    lease?: AdmitterLease | undefined;
  },
): Admitter {
  const { pool, logger = createDefaultLogger(), metrics: given, lease, ...rest } = options;
  const metrics = resolveMetrics(given);
  const config = parseConfig('admitter options', admitterOptionsSchema, rest);
  let freedKeys = new Set<string>();
  let pokedKeys = new Set<string>();
  let fullPassWanted = false;
  let flushing: Promise<void> | null = null;
  // Set by stop(), for good (an IntervalService does not start again): a settle or notification
  // that lands after it (a handler that outlived the worker's grace, say) must not start a flush
  // on a pool its owner may have ended.
  let stopped = false;
  // Where the next full pass goes on, so a bounded pass still reaches every key in turn.
  let cursor: string | null = null;

  async function admit(keys: readonly string[] | null, wait: boolean): Promise<AdmitRow> {
    const room = lease ? lease.room() : 0;
    const sent = performance.now();
    let row: AdmitRow;
    try {
      row = (
        await runSql<AdmitRow>(
          pool,
          admitKeys({
            keys,
            wait,
            maxKeys: config.maxKeys,
            afterKey: keys ? null : cursor,
            lease: lease && room > 0 ? { ...lease, max: room } : null,
          }),
        )
      ).rows[0]!;
    } finally {
      // Given back before what it leased is adopted, in the same turn: adopted, those take it.
      if (room > 0) lease!.release?.(room);
    }
    if (row.admitted > 0) metrics.admitted.inc(row.admitted);
    if (row.leased.length > 0) {
      metrics.admittedLeased.inc(row.leased.length);
      lease!.adopt(row.leased, sent);
    }
    return row;
  }

  async function admitEach(keys: readonly string[], wait: boolean): Promise<number> {
    let admitted = 0;
    for (let i = 0; i < keys.length; i += config.maxKeys) {
      admitted += (await admit(keys.slice(i, i + config.maxKeys), wait)).admitted;
    }
    return admitted;
  }

  async function fullPass(): Promise<AdmitResult> {
    let admitted = 0;
    for (let round = 0; round < config.maxRounds; round++) {
      const row = await admit(null, false);
      admitted += row.admitted;
      cursor = row.last_key;
      if (cursor === null) break;
    }
    return { admitted };
  }

  function remember(set: Set<string>, key: string): void {
    if (stopped) return;
    if (key === '*' || set.size >= MAX_REMEMBERED_KEYS) fullPassWanted = true;
    else set.add(key);
    flushing ??= flushSoon();
  }

  async function flushSoon(): Promise<void> {
    // One event-loop turn: settles finishing together are admitted by one statement.
    await new Promise((resolve) => setImmediate(resolve));
    try {
      while (freedKeys.size > 0 || pokedKeys.size > 0 || fullPassWanted) {
        const freed = [...freedKeys];
        const poked = [...pokedKeys].filter((k) => !freedKeys.has(k));
        const full = fullPassWanted;
        freedKeys = new Set();
        pokedKeys = new Set();
        fullPassWanted = false;
        try {
          if (freed.length > 0) await admitEach(freed, true);
          if (poked.length > 0) await admitEach(poked, false);
          if (full) await fullPass();
        } catch (error) {
          // The keys are not retried here: the next full pass finds whatever is still waiting.
          metrics.admitFailures.inc();
          logger.warn(
            { reason: 'admit_failed', keys: freed.length + poked.length, err: errorMessage(error) },
            'admission failed; the next pass admits what waits',
          );
        }
      }
    } finally {
      flushing = null;
    }
  }

  const service = new IntervalService('admitter', config.intervalMs, fullPass, logger);
  return {
    start: () => service.start(),
    async stop() {
      stopped = true;
      await service.stop();
      while (flushing) await flushing;
    },
    async runOnce(o = {}) {
      if (o.keys) return { admitted: await admitEach(o.keys, true) };
      return fullPass();
    },
    freed: (key) => remember(freedKeys, key),
    poke: (key) => remember(pokedKeys, key),
    metrics,
  };
}
