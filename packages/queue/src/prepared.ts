import type { SQL } from 'drizzle-orm';
import type pg from 'pg';
import {
  renderSql,
  runStatement,
  withTransaction,
  type Opening,
  type QueryOutcome,
  type Queryable,
  type Statement,
  type TransactionOptions,
} from './db.js';
import type { Logger } from './logger.js';
import { statementName } from './statement-name.js';

/**
 * A drizzle query as a named statement. The name is derived from the text, so each distinct text
 * (a worker's claim differs with its queues, aging and commit setting) is parsed and planned once
 * per connection and only bound and executed after that.
 */
export function namedStatement(prefix: string, query: SQL): Statement {
  const { text, values } = renderSql(query);
  return { name: statementName(prefix, text), text, values };
}

/**
 * Runs `statement` on `target`; with `opening`, the transaction's BEGIN goes with it. `alone`:
 * `target` is a connection of skiplock's own that runs the statement outside any transaction (the
 * worker's LISTEN connection), so a statement that failed there can be sent again, as on `pool`.
 * `follow`: a statement run right after it in the same transaction, in the same write when the
 * BEGIN goes too (its outcome is `followed`).
 */
export type StatementRunner = <T>(
  target: Queryable,
  statement: Statement,
  opening?: Opening,
  alone?: boolean,
  follow?: Statement,
) => Promise<QueryOutcome<T> & { followed?: QueryOutcome<pg.QueryResultRow> }>;

/**
 * Runs statements as named prepared statements until a connection shows it cannot keep them: a
 * pooler such as PgBouncer in transaction mode before 1.21 (or with `max_prepared_statements = 0`)
 * moves the client to another server connection, or something ran DISCARD ALL. Either way the
 * failed statement did not run. From then on statements go unnamed (logged once with reason
 * `prepared_statements_off`); one sent on `pool` (or `alone`) is simply sent again, one in a caller's
 * transaction cannot be (the error aborted that transaction), so the caller sees it once.
 */
export function preparedRunner(options: {
  enabled: boolean;
  pool: Queryable;
  logger: Logger;
  /** Who sends the statements, for the log line: "enqueue", "the worker". */
  who: string;
}): StatementRunner {
  let enabled = options.enabled;
  return async function run<T>(
    target: Queryable,
    statement: Statement,
    opening?: Opening,
    alone = false,
    follow?: Statement,
  ) {
    if (!enabled) return runStatement<T>(target, statement, false, opening, follow);
    try {
      return await runStatement<T>(target, statement, true, opening, follow);
    } catch (error) {
      if (!isPreparedStatementError(error)) throw error;
      // Statements that failed together turn them off once, and say so once.
      if (enabled) {
        enabled = false;
        options.logger.warn(
          { reason: 'prepared_statements_off', code: (error as { code?: string }).code },
          'named prepared statements do not work on this connection (PgBouncer in transaction ' +
            `mode?); ${options.who} sends statements unnamed from now on — set preparedStatements: false`,
        );
      }
      if (target !== options.pool && !(alone && opening === undefined)) {
        // Ours, in a transaction: `withOwnTransaction` may run that transaction again.
        markOwn(error);
        throw error;
      }
      return runStatement<T>(target, statement, false, undefined, follow);
    }
  };
}

/**
 * Runs `work` in a transaction of skiplock's own. When a pooler lost one of skiplock's prepared
 * statements, nothing committed and the sender that failed (worker, client or saga runtime) sends
 * unnamed statements from then on, so the transaction is simply run again: at most once per
 * sender. The same error from a statement of the caller's own inside `work` (an `EXECUTE` of a
 * name it never prepared) fails the call: running `work` again would repeat whatever it did
 * outside the database, and the statement would fail the same way. `work` must expect to run more
 * than once (it runs from its start each time). `opening`: see `withTransaction`.
 */
export async function withOwnTransaction<T>(
  pool: pg.Pool,
  work: (tx: pg.PoolClient, opening: Opening | undefined) => Promise<T>,
  options: TransactionOptions = {},
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await withTransaction(pool, work, options);
    } catch (error) {
      if (attempt >= 3 || !isOwn(error)) throw error;
    }
  }
}

/** Marks a lost prepared statement of skiplock's own (a property of the error, not enumerable). */
const OWN_STATEMENT_LOST = Symbol('skiplock.ownStatementLost');

function markOwn(error: unknown): void {
  if (typeof error === 'object' && error !== null && Object.isExtensible(error)) {
    Object.defineProperty(error, OWN_STATEMENT_LOST, { value: true });
  }
}

function isOwn(error: unknown): boolean {
  return (
    typeof error === 'object' &&
    error !== null &&
    (error as { [OWN_STATEMENT_LOST]?: boolean })[OWN_STATEMENT_LOST] === true
  );
}

/** invalid_sql_statement_name (26000) or duplicate_prepared_statement (42P05). */
function isPreparedStatementError(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === '26000' || code === '42P05';
}
