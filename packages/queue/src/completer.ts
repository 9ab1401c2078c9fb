import type pg from 'pg';
import { errorMessage } from './errors.js';
import type { Logger } from './logger.js';
import { namedStatement, type StatementRunner } from './prepared.js';
import type { Statement } from './db.js';
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
 * job, and no retry wrapper per job on the path every completion takes. Batches flushed meanwhile
 * go out as usual.
 */
export class Completer {
  private waiting: Waiting[] = [];
  private flushing: Promise<void> | null = null;
  /** Batches waiting to be written again after a failed write (see `write`). */
  private readonly retrying = new Set<Promise<void>>();

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

  /** Waits until every completion handed in so far has been written (or has failed). */
  async drain(): Promise<void> {
    while (this.flushing || this.retrying.size > 0) {
      await Promise.all([this.flushing, ...this.retrying]);
    }
  }

  private async flushSoon(): Promise<void> {
    await new Promise((resolve) => setImmediate(resolve));
    try {
      while (this.waiting.length > 0) {
        const batch = this.waiting.splice(0, this.maxBatch);
        await this.write(batch, this.statement(batch, false), 1);
      }
    } finally {
      this.flushing = null;
    }
  }

  private statement(batch: Waiting[], again: boolean): Statement {
    return namedStatement(
      again ? 'skiplock_complete_batch_again' : 'skiplock_complete_batch',
      completeBatch(
        this.workerId,
        batch.map((w) => w.token),
        !this.asyncCommit,
        again,
      ),
    );
  }

  /**
   * Writes one batch and settles its completions; never rejects. A failed write is tried again
   * after the worker's backoff off the flush loop, so the completions of other batches do not wait
   * behind it (a lock timeout on one batch's rows must not hold back every later completion).
   */
  private async write(batch: Waiting[], statement: Statement, attempt: number): Promise<void> {
    let answer: CompletedBatch;
    try {
      answer = (await this.run<CompletedBatch>(this.pool, statement)).rows[0]!;
    } catch (error) {
      if (attempt >= this.attempts) {
        for (const w of batch) w.reject(error);
        return;
      }
      this.logger.warn(
        { reason: 'db_error', attempt, jobs: batch.length, err: errorMessage(error) },
        'settle write failed; retrying',
      );
      // Written again as a retry: the failed write may have committed and lost its answer.
      const again = attempt === 1 ? this.statement(batch, true) : statement;
      const retry = sleep(retryDelayMs(attempt)).then(() => this.write(batch, again, attempt + 1));
      this.retrying.add(retry);
      void retry.then(() => this.retrying.delete(retry));
      return;
    }
    if (answer.completed === batch.length) {
      for (const w of batch) w.resolve(true);
    } else {
      const owned = new Set(answer.ids);
      for (const w of batch) w.resolve(owned.has(w.token.id));
    }
  }
}
