import type { JobContext } from '@skiplock/queue';
import { completeWithStatement, type QueryOutcome, type Statement } from '@skiplock/queue/engine';
import type pg from 'pg';
import { SagaError } from './errors.js';
import type { Transition } from './transitions.js';

/**
 * Locks the saga and moves it on after the step's output. `locked`: the outcome of the
 * `lockStatement` the completion sent with the job's fence, when it did; else `advance` sends it.
 */
type Advance = (
  tx: pg.PoolClient,
  output: unknown,
  locked?: QueryOutcome<pg.QueryResultRow>,
) => Promise<Transition>;

/**
 * Completes a step's job and records its result in one fenced transaction. When the step calls
 * `ctx.transaction(work)`, that transaction opens at once, runs `work`, and stays open until the
 * step returns its output; then the saga advances in it and it commits. So the step's own writes,
 * its job's completion and the saga's next job commit together or not at all.
 */
export class Completion {
  private output: { resolve(value: unknown): void; reject(error: unknown): void } | null = null;
  private done: Promise<Transition> | null = null;

  constructor(
    private readonly job: JobContext,
    private readonly advance: Advance,
    /**
     * The saga's lock (and record) for an output. A step without a transaction of its own has
     * its output before its completing transaction opens, so this statement goes in the same
     * write as that transaction's BEGIN and the job's fence: one round trip of the four such a
     * step took fewer (BEGIN with the fence, the lock, the next job's insert, COMMIT).
     */
    private readonly lockStatement?: (output: unknown) => Statement,
  ) {}

  transaction<T>(work: (tx: pg.PoolClient) => Promise<T>): Promise<T> {
    if (this.done) {
      return Promise.reject(
        new SagaError('transaction_reused', 'ctx.transaction may be called once per attempt'),
      );
    }
    const output = new Promise<unknown>((resolve, reject) => {
      this.output = { resolve, reject };
    });
    output.catch(() => {});
    let first: { json: string | null } | null = null;
    return new Promise<T>((resolve, reject) => {
      this.done = this.job.completeWith(async (tx) => {
        let value: T;
        try {
          value = await work(tx);
        } catch (error) {
          reject(error);
          throw error;
        }
        if (first) {
          // The queue ran the transaction again: a pooler lost a prepared statement (see
          // `withOwnTransaction`). The step already has the first run's result and may have built
          // its output from it; when this run's differs (an id the first insert drew, which rolled
          // back: found in review), that output would name what does not exist, so the attempt
          // fails and the next runs the whole step, its statements unnamed by then.
          if (first.json === null || first.json !== jsonOf(value)) {
            throw new SagaError(
              'transaction_rerun',
              "the step's transaction was run again (a pooler lost a prepared statement) and its work returned another result; the step runs again",
            );
          }
        } else {
          first = { json: jsonOf(value) };
          resolve(value);
        }
        return this.advance(tx, await output);
      });
      // A lost lock fails before `work` runs; the step sees it from `ctx.transaction`.
      this.done.catch(reject);
    });
  }

  /** Advances with the step's output, in the open transaction or a new one. */
  finish(output: unknown): Promise<Transition> {
    if (this.done) {
      this.output!.resolve(output);
      return this.done;
    }
    const lock = this.lockStatement;
    if (!lock) return this.job.completeWith((tx) => this.advance(tx, output));
    return completeWithStatement(this.job, lock(output), (tx, locked) =>
      this.advance(tx, output, locked),
    );
  }

  /** The step failed: roll back an open transaction. */
  abandon(error: unknown): void {
    this.output?.reject(error);
    this.done?.catch(() => {});
  }
}

/**
 * A value as JSON, to compare two runs' results (undefined, what a `work` that returns nothing
 * gives, compares equal to itself); null when JSON cannot hold it: then never equal.
 */
function jsonOf(value: unknown): string | null {
  try {
    return JSON.stringify(value) ?? 'undefined';
  } catch {
    return null;
  }
}
