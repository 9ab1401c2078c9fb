import type { JobContext } from '@skiplock/queue';
import type pg from 'pg';
import { SagaError } from './errors.js';
import type { Transition } from './transitions.js';

type Advance = (tx: pg.PoolClient, output: unknown) => Promise<Transition>;

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
    let ran = false;
    return new Promise<T>((resolve, reject) => {
      this.done = this.job.completeWith(async (tx) => {
        // The queue runs a completing transaction again when a pooler lost a prepared statement
        // (see `withOwnTransaction`). The step has its first run's result already and may have
        // built its output from it, so running `work` again here would record an output from a
        // transaction that rolled back (found in review: an order id that does not exist). This
        // attempt fails instead; the next runs the whole step, its statements unnamed by then.
        if (ran) {
          throw new SagaError(
            'transaction_rerun',
            "the step's transaction had to be run again (a pooler lost a prepared statement); the step runs again",
          );
        }
        ran = true;
        let value: T;
        try {
          value = await work(tx);
        } catch (error) {
          reject(error);
          throw error;
        }
        resolve(value);
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
    return this.job.completeWith((tx) => this.advance(tx, output));
  }

  /** The step failed: roll back an open transaction. */
  abandon(error: unknown): void {
    this.output?.reject(error);
    this.done?.catch(() => {});
  }
}
