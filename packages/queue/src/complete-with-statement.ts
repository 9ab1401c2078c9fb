import type pg from 'pg';
import { runStatement, type QueryOutcome, type Statement } from './db.js';
import type { JobContext } from './define.js';

/** What a worker's job context keeps under `COMPLETE_WITH_STATEMENT`. */
export type CompleteWithStatement = <T>(
  statement: Statement,
  work: (tx: pg.PoolClient, first: QueryOutcome<pg.QueryResultRow>) => Promise<T>,
) => Promise<T>;

/** Where a worker's job context keeps it; a symbol keeps it out of the public `JobContext`. */
export const COMPLETE_WITH_STATEMENT = Symbol('skiplock.completeWithStatement');

/**
 * `ctx.completeWith(work)` whose first statement is known before the transaction opens: it goes
 * in the same write as the transaction's BEGIN and the job's fenced completion, and `work` gets
 * its outcome. One round trip fewer than sending it from `work` (a saga step without a
 * transaction of its own locks its saga and records its output this way). The worker's
 * `preparedStatements` decides whether it goes named, as for the fence it goes with.
 *
 * It runs even when the fence finds the job's lock lost (it is in the same write, or, on a
 * connection that has not parsed it yet, sent right after): its effects roll back with the
 * transaction, and the attempt ends with `LockLostError`, or with the statement's own error
 * should it fail too. A context that is not a worker's (a test's, another copy of the package)
 * runs the statement first in `work`, unnamed: no runner there knows whether the connection
 * keeps prepared statements (a pooler in transaction mode).
 */
export function completeWithStatement<T>(
  ctx: JobContext,
  statement: Statement,
  work: (tx: pg.PoolClient, first: QueryOutcome<pg.QueryResultRow>) => Promise<T>,
): Promise<T> {
  const own = (ctx as { [COMPLETE_WITH_STATEMENT]?: CompleteWithStatement })[
    COMPLETE_WITH_STATEMENT
  ];
  if (own) return own(statement, work);
  return ctx.completeWith(async (tx) => work(tx, await runStatement(tx, statement, false)));
}
