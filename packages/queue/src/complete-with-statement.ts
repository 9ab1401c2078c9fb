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
 * transaction of its own locks its saga and records its output this way). Should the fence find
 * the job's lock lost, the statement's effects roll back with the transaction. A context that is
 * not a worker's (a test's, an older copy of the package) runs the statement first in `work`.
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
  return ctx.completeWith(async (tx) => work(tx, await runStatement(tx, statement)));
}
