import type pg from 'pg';
import { runSql } from './db.js';
import { LockLostError } from './errors.js';
import type { Logger } from './logger.js';
import { extendLeases } from './sql/heartbeat.js';
import type { LockToken } from './sql/settle.js';
import { sleep, withJitter } from './timers.js';
import { detached } from './tracing.js';

/** The shortest wait between ticks, whatever lease a row carries. */
const MIN_INTERVAL_MS = 50;

export interface HeartbeatResult {
  /** Leases extended by this tick. */
  renewed: number;
  /** Jobs no longer this worker's (taken back by the sweeper); their handlers were aborted. */
  lost: number;
  /** Jobs still this worker's whose row another transaction holds locked: skipped this tick. */
  locked: number;
}

export interface LeaseHolder {
  token: LockToken;
  /**
   * How long the lease lasts from `renewedAt`: with `renewedAt`, where this worker knows the row's
   * lease ends (see `leaseRenewed`; longer than `renewMs` while an extension lasts).
   */
  leaseMs: number;
  /**
   * What a renewal leases the row for (its `lease_ms`): the loop beats at a third of it, since
   * after an extension runs out each renewal holds the row only that long.
   */
  readonly renewMs: number;
  /** performance.now() of the last renewal this worker knows committed (or of the claim). */
  renewedAt: number;
  /** Only jobs still running their handler are renewed; settling ones keep their lease. */
  isRunning(): boolean;
  /**
   * Its completing transaction's COMMIT is in flight: a renewal that misses its row (read after
   * the server committed) has not lost it. Not renewed for a whole lease, it is given up all the
   * same.
   */
  readonly committing?: boolean;
  abort(reason: LockLostError): void;
}

/**
 * Records a renewal sent at `sentAt` (performance.now()) that leased the row for `ms` from then.
 * The statements keep the later end (`greatest(lease_expires_at, now() + ms)`), and so does
 * this: an extension's end stays until a renewal passes it, and after it each renewal holds the
 * row only `ms`. Before, `leaseMs` kept an extension's length for good, so a worker cut off
 * after its extension ran out gave its lease up that much later than the database did, and the
 * job ran on beside its next attempt (found by an audit: 2 s of overlap for a 3 s extension of a
 * 1 s lease).
 */
export function leaseRenewed(holder: LeaseHolder, sentAt: number, ms: number): void {
  const ends = Math.max(holder.renewedAt + holder.leaseMs, sentAt + ms);
  holder.renewedAt = sentAt;
  holder.leaseMs = ends - sentAt;
}

/**
 * Renews the leases of all running jobs in one statement per tick. A job missing from the result
 * was taken back by the sweeper; one this worker could not renew for a whole lease (the database is
 * unreachable) is presumed lost too. Either way its handler is aborted with `lock_lost`, and the
 * fenced settle guarantees nothing it writes for that job commits.
 *
 * A job whose row another transaction holds locked (most often its own `completeWith` or saga
 * `ctx.transaction`, which settles it) is skipped, never waited on, so it costs no other job its
 * lease. It keeps running, since the database showed it is still this worker's; its lease is not
 * extended while the lock lasts, and the next tick after the lock is released renews it (or finds
 * it settled). The sweeper skips locked rows too, so the lease can lapse only once the lock is
 * gone; then the sweeper may take the job back before that tick, and its fenced writes match 0 rows.
 */
export class Heartbeat {
  private readonly stopper = new AbortController();
  private loop: Promise<void> | null = null;
  /** Ends the loop's current wait early: stopping, or a job with a shorter lease came in. */
  private nap: AbortController | null = null;
  /** When the loop's current wait ends (performance.now()). */
  private napEnds = Infinity;
  /** Holders already given up, so that each lost lease is reported once. */
  private readonly given = new WeakSet<LeaseHolder>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly workerId: string,
    /** Skip the WAL flush wait on renewals (the worker's `asyncCommit`). */
    private readonly asyncCommit: boolean,
    private readonly intervalMs: number,
    private readonly holders: () => Iterable<LeaseHolder>,
    private readonly logger: Logger,
    private readonly onLost: (holder: LeaseHolder) => void,
  ) {}

  start(): void {
    this.loop ??= detached(() => this.run());
  }

  async stop(): Promise<void> {
    this.stopper.abort();
    this.nap?.abort();
    await this.loop;
  }

  /**
   * Tells the loop that a job leased for `leaseMs` came in. A job carries the lease of the
   * definition that inserted it, which can be shorter than any this worker defines (a producer
   * of a newer deploy that shortened it, or a process that starts sagas with another policy): at
   * `intervalMs`, a third of this worker's shortest lease, its lease ran out before the first
   * renewal and a sweeper took the job back from under its running handler. The loop's wait is
   * cut short when it would end later than a third of this lease from now; each wait is a third
   * of the shortest lease among the jobs held, `intervalMs` at most.
   */
  adopt(leaseMs: number): void {
    if (performance.now() + leaseMs / 3 < this.napEnds) this.nap?.abort();
  }

  /**
   * The wait between ticks for the jobs held now: `intervalMs`, or a third of a shorter lease
   * held (the loop's next wait, and `runOnce()`'s interval).
   */
  waitMs(): number {
    let ms = this.intervalMs;
    for (const holder of this.holders()) {
      if (holder.renewMs / 3 < ms && holder.isRunning()) ms = holder.renewMs / 3;
    }
    return Math.max(MIN_INTERVAL_MS, Math.floor(ms));
  }

  /**
   * One renewal; returns how many leases were renewed, how many were found lost, and how many
   * were skipped because another transaction holds their row locked (still this worker's).
   */
  async beat(): Promise<HeartbeatResult> {
    const running = [...this.holders()].filter((h) => h.isRunning());
    if (running.length === 0) return { renewed: 0, lost: 0, locked: 0 };
    const started = performance.now();
    const result: HeartbeatResult = { renewed: 0, lost: 0, locked: 0 };
    try {
      const { rows } = await runSql<{ id: string; renewed: boolean }>(
        this.pool,
        extendLeases(
          this.workerId,
          running.map((h) => h.token),
          this.asyncCommit,
        ),
      );
      const ours = new Map(rows.map((r) => [r.id, r.renewed]));
      for (const holder of running) {
        const renewed = ours.get(holder.token.id);
        if (renewed === undefined) {
          if (holder.isRunning() && !holder.committing && this.lose(holder)) result.lost += 1;
          continue;
        }
        leaseRenewed(holder, started, holder.renewMs);
        if (renewed) {
          result.renewed += 1;
        } else {
          result.locked += 1;
          this.logger.debug(
            { reason: 'lease_row_locked', jobId: holder.token.id },
            'lease not renewed this tick: another transaction holds the job row',
          );
        }
      }
      return result;
    } catch (error) {
      this.logger.warn({ reason: 'heartbeat_failed', err: String(error) }, 'lease renewal failed');
      return { renewed: 0, lost: this.abortOverdue(running), locked: 0 };
    }
  }

  /** Gives up the leases this worker has not renewed for a whole lease; returns how many. */
  private abortOverdue(holders: Iterable<LeaseHolder>): number {
    const now = performance.now();
    let lost = 0;
    for (const holder of holders) {
      if (holder.isRunning() && now - holder.renewedAt > holder.leaseMs && this.lose(holder)) {
        lost += 1;
      }
    }
    return lost;
  }

  /** Aborts the holder's handler; false when it was given up before. */
  private lose(holder: LeaseHolder): boolean {
    if (this.given.has(holder)) return false;
    this.given.add(holder);
    this.onLost(holder);
    holder.abort(new LockLostError(holder.token.id));
    return true;
  }

  /** A renewal in flight, if any: a tick never stacks a second one on it. */
  private renewing: Promise<unknown> | null = null;
  /** `renewNow` came while a renewal was in flight, which may have read the rows before it. */
  private renewAgain = false;

  /**
   * Renews now rather than at the next tick: an operator stopped one of this worker's jobs (see
   * `cancelJob`), and the renewal is what finds it so and aborts its handler, or keeps it from
   * starting when it waits in the buffer. A renewal in flight may have read its row before the
   * stop committed, so one more follows it; any number of calls meanwhile add only that one.
   */
  renewNow(): void {
    if (this.stopper.signal.aborted) return;
    if (this.renewing) this.renewAgain = true;
    else this.tick();
  }

  /**
   * One tick of the loop: gives up the leases not renewed for a whole lease, then renews the rest
   * unless a renewal is still in flight. A renewal can hang rather than fail (the database is cut
   * off but the connection is not yet broken); ticks go on without waiting for it, so unrenewed
   * leases are given up all the same. Also what `runOnce()` runs on a worker never started.
   */
  tick(): void {
    this.abortOverdue(this.holders());
    this.renewing ??= this.beat().finally(() => {
      this.renewing = null;
      if (this.renewAgain) {
        this.renewAgain = false;
        if (!this.stopper.signal.aborted) this.tick();
      }
    });
  }

  private async run(): Promise<void> {
    while (!this.stopper.signal.aborted) {
      const nap = (this.nap = new AbortController());
      const ms = withJitter(this.waitMs(), 0.1);
      this.napEnds = performance.now() + ms;
      await sleep(ms, nap.signal);
      this.napEnds = Infinity;
      if (this.stopper.signal.aborted) break;
      // Cut short by `adopt`: wait again, a third of the shorter lease from now.
      if (nap.signal.aborted) continue;
      this.tick();
    }
  }
}
