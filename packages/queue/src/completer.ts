import type pg from 'pg';
import { errorMessage } from './errors.js';
import type { Logger } from './logger.js';
import { namedStatement, type StatementRunner } from './prepared.js';
import { completeBatch, type CompletedBatch, type LockToken } from './sql/settle.js';
import { retryDelayMs, sleep } from './timers.js';

interface Waiting {
  token: LockToken;
  resolve: (stillOwned: boolean) => void;
  reject: (error: unknown) => void;
}

/**
 * Coalesces completions into one fenced UPDATE per flush. Completions that arrive while a flush is
 * in flight ride the next one, so under load one round trip settles many jobs and when idle a
 * completion waits for no timer, only for the current event-loop turn.
 *
 * A failed write is tried again here, for the whole batch (up to `attempts` writes, with the
 * worker's backoff), rather than by each job: one log line per failed write instead of one per
 * job, and no retry wrapper per job on the path every completion takes.
 */
export class Completer {
  private waiting: Waiting[] = [];
  private flushing: Promise<void> | null = null;

  constructor(
    private readonly pool: pg.Pool,
    private readonly workerId: string,
    /** Skip the WAL flush wait on completions (the worker's `asyncCommit`). */
    private readonly asyncCommit: boolean,
    /** How statements are sent (named prepared statements unless the worker turned them off). */
    private readonly run: StatementRunner,
    /** Writes of one batch before its completions fail (the worker's `settleAttempts`). */
    private readonly attempts: number,
    private readonly logger: Logger,
    private readonly maxBatch = 500,
  ) {}

  /** Resolves true when the job was completed, false when the worker no longer owned it. */
  complete(token: LockToken): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ token, resolve, reject });
      if (!this.flushing) this.flushing = this.flushSoon();
    });
  }

  /** Waits until every completion handed in so far has been written. */
  async drain(): Promise<void> {
    while (this.flushing) await this.flushing;
  }

  private async flushSoon(): Promise<void> {
    await new Promise((resolve) => setImmediate(resolve));
    try {
      while (this.waiting.length > 0) {
        const batch = this.waiting.splice(0, this.maxBatch);
        try {
          const { completed, ids } = await this.write(batch.map((w) => w.token));
          if (completed === batch.length) {
            for (const w of batch) w.resolve(true);
          } else {
            const owned = new Set(ids);
            for (const w of batch) w.resolve(owned.has(w.token.id));
          }
        } catch (error) {
          for (const w of batch) w.reject(error);
        }
      }
    } finally {
      this.flushing = null;
    }
  }

  private async write(tokens: LockToken[]): Promise<CompletedBatch> {
    const statement = namedStatement(
      'skiplock_complete_batch',
      completeBatch(this.workerId, tokens, !this.asyncCommit),
    );
    for (let attempt = 1; ; attempt++) {
      try {
        return (await this.run<CompletedBatch>(this.pool, statement)).rows[0]!;
      } catch (error) {
        if (attempt >= this.attempts) throw error;
        this.logger.warn(
          { reason: 'db_error', attempt, jobs: tokens.length, err: errorMessage(error) },
          'settle write failed; retrying',
        );
        await sleep(retryDelayMs(attempt));
      }
    }
  }
}
