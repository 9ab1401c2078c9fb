import { sql, type SQL, type SQLChunk } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import type pg from 'pg';
import { queryAfterBegin } from './begin-with.js';
import { SkiplockError } from './errors.js';

/**
 * Anything skiplock can run a statement on: a pool, a client (possibly inside the caller's
 * `BEGIN`), or a drizzle database or transaction. Joining the caller's transaction is what lets a
 * business write and its job commit or roll back together.
 */
export type Queryable = pg.Pool | pg.PoolClient | pg.Client | DrizzleExecutor;

export interface DrizzleExecutor {
  execute(query: SQL): PromiseLike<unknown>;
}

export interface QueryOutcome<T> {
  rows: T[];
  rowCount: number;
}

const dialect = new PgDialect();

function isPgQueryable(target: Queryable): target is pg.Pool | pg.PoolClient | pg.Client {
  return typeof (target as { query?: unknown }).query === 'function';
}

/**
 * Whether `target` is a pg pool: each of its statements runs on some connection in a transaction
 * of its own, never inside a caller's (pg's `Pool` alone counts its clients).
 */
export function isPool(target: Queryable): target is pg.Pool {
  return isPgQueryable(target) && 'totalCount' in target;
}

/** A drizzle query's text with `$n` markers and its parameter values. */
export function renderSql(query: SQL): { text: string; values: unknown[] } {
  const { sql: text, params } = dialect.sqlToQuery(query);
  return { text, values: params };
}

export async function runSql<T>(target: Queryable, query: SQL): Promise<QueryOutcome<T>> {
  if (isPgQueryable(target)) {
    const { text, values } = renderSql(query);
    const result = await target.query(text, values);
    return { rows: result.rows as T[], rowCount: result.rowCount ?? 0 };
  }
  const result = (await target.execute(query)) as { rows?: T[]; rowCount?: number | null };
  return { rows: result.rows ?? [], rowCount: result.rowCount ?? 0 };
}

/**
 * A statement with constant text and `$n` parameters. On a pg pool or client it is sent as a named
 * prepared statement when `prepared` is on: each connection parses and plans it once, then only
 * binds and executes it.
 */
export interface Statement {
  name: string;
  text: string;
  values: unknown[];
}

export async function runStatement<T>(
  target: Queryable,
  statement: Statement,
  prepared = true,
  opening?: Opening,
  follow?: Statement,
): Promise<QueryOutcome<T> & { followed?: QueryOutcome<pg.QueryResultRow> }> {
  if (isPgQueryable(target)) {
    const sent = sendable(statement, prepared);
    let result: pg.QueryResult<T & pg.QueryResultRow>;
    if (opening && !opening.sent) {
      // A pool would run BEGIN on one connection and the statement on another.
      if (isPool(target)) {
        throw new TypeError('runStatement: a transaction opens on a client, not on a pool');
      }
      opening.sent = true;
      const client = target as pg.ClientBase;
      const all =
        follow &&
        queryAfterBegin<pg.QueryResultRow>(client, opening.begin, [
          sent,
          sendable(follow, prepared),
        ]);
      if (all) {
        const [first, after] = await all;
        return {
          rows: first!.rows as T[],
          rowCount: first!.rowCount ?? 0,
          followed: { rows: after!.rows, rowCount: after!.rowCount ?? 0 },
        };
      }
      // One of them not yet parsed on this connection: BEGIN goes with the statement if it can.
      const together = queryAfterBegin<T & pg.QueryResultRow>(client, opening.begin, [sent]);
      if (together) {
        result = (await together)[0]!;
      } else {
        await target.query(opening.begin);
        result = await target.query<T & pg.QueryResultRow>(sent);
      }
    } else {
      result = await target.query<T & pg.QueryResultRow>(sent);
    }
    const outcome = { rows: result.rows, rowCount: result.rowCount ?? 0 };
    if (!follow) return outcome;
    const after = await target.query(sendable(follow, prepared));
    return { ...outcome, followed: { rows: after.rows, rowCount: after.rowCount ?? 0 } };
  }
  if (opening && !opening.sent) {
    throw new TypeError('runStatement: a transaction opens on a node-postgres client');
  }
  const outcome = await runDrizzle<T>(target, statement);
  return follow ? { ...outcome, followed: await runDrizzle(target, follow) } : outcome;
}

/** A statement as node-postgres sends it: named (prepared per connection) or not. */
const sendable = (s: Statement, prepared: boolean) =>
  prepared ? s : { text: s.text, values: s.values };

async function runDrizzle<T>(target: DrizzleExecutor, s: Statement): Promise<QueryOutcome<T>> {
  const result = (await target.execute(toDrizzleSql(s))) as {
    rows?: T[] | undefined;
    rowCount?: number | null | undefined;
  };
  return { rows: result.rows ?? [], rowCount: result.rowCount ?? 0 };
}

/** The same statement for a drizzle executor: text between `$n` markers, values as parameters. */
function toDrizzleSql({ text, values }: Statement): SQL {
  const chunks: SQLChunk[] = [];
  let last = 0;
  for (const match of text.matchAll(/\$(\d+)/g)) {
    chunks.push(sql.raw(text.slice(last, match.index)), sql.param(values[Number(match[1]) - 1]));
    last = match.index + match[0].length;
  }
  chunks.push(sql.raw(text.slice(last)));
  return sql.join(chunks);
}

/**
 * The `BEGIN` of a transaction that goes with its first statement (`runStatement`'s `opening`):
 * one round trip fewer. `sent` turns true once a statement has taken it.
 */
export interface Opening {
  readonly begin: string;
  sent: boolean;
}

/** Sends `opening`'s BEGIN on its own, unless a statement took it already: before a statement
 * that cannot take it (one of the caller's, or one run through `runSql`). */
export async function sendOpening(client: pg.PoolClient, opening: Opening | undefined) {
  if (!opening || opening.sent) return;
  opening.sent = true;
  await client.query(opening.begin);
}

/**
 * Runs `work` inside a transaction on one pooled connection, released before returning. With
 * `opening`, `work` gets the transaction's `BEGIN` unsent and passes it to its first statement
 * (`runStatement`'s `opening`), which sends both in one round trip; a `work` that sent no
 * statement commits nothing and sends neither `COMMIT` nor `ROLLBACK`.
 */
export function withTransaction<T>(
  pool: pg.Pool,
  work: (client: pg.PoolClient, opening: Opening | undefined) => Promise<T>,
  options: TransactionOptions = {},
): Promise<T> {
  // READ COMMITTED whatever the server's or role's default: fencing and the saga's joins
  // re-read rows after taking their locks, which a fixed snapshot would not show.
  return inTransaction(pool, 'BEGIN ISOLATION LEVEL READ COMMITTED', work, options);
}

export interface TransactionOptions {
  /** Defer `BEGIN` to `work`'s first statement (see `withTransaction`). */
  opening?: boolean | undefined;
  /**
   * Ends the transaction when it aborts while `work` runs, whatever `work` is waiting on: the
   * call rejects with the reason at once; the statement in flight, if any, is cancelled and the
   * connection closed, not returned to the pool, so the server rolls the transaction back and
   * frees its locks, and a `work` that goes on later finds its client closed instead of someone
   * else's transaction. A job's completing transaction passes its run: its timeout, lost lease or
   * shutdown ends it.
   */
  abort?: TransactionAbort | undefined;
  /**
   * Told `true` as COMMIT is sent and `false` should it fail. Between the server's commit and its
   * answer the transaction's writes are visible to others while `work`'s caller cannot know they
   * committed: a job's completing transaction uses it to keep its heartbeat from reading the
   * completed row as a lease lost.
   */
  committing?: ((inFlight: boolean) => void) | undefined;
}

/**
 * What can end a transaction early: an AbortSignal's part that `inTransaction` uses, which a
 * running job provides without building one (an AbortSignal, an EventTarget, costs about 9 µs
 * with its listener; most jobs never need one).
 */
export interface TransactionAbort {
  /** Why it ended, once it has; null until then. */
  readonly abortReason: Error | null;
  /** Calls `listener` once when it ends; the returned function removes it. */
  onceAborted(listener: (reason: Error) => void): () => void;
}

/**
 * Runs read-only `work` on one snapshot (REPEATABLE READ, READ ONLY): a view read in several
 * statements is the database as of one moment, never half before and half after a commit.
 */
export function withSnapshot<T>(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<T>,
): Promise<T> {
  return inTransaction(pool, 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY', work);
}

async function inTransaction<T>(
  pool: pg.Pool,
  begin: string,
  work: (client: pg.PoolClient, opening: Opening | undefined) => Promise<T>,
  { opening: deferBegin = false, abort, committing }: TransactionOptions = {},
): Promise<T> {
  if (abort?.abortReason) throw abort.abortReason;
  const client = await pool.connect();
  if (abort?.abortReason) {
    client.release();
    throw abort.abortReason;
  }
  // The pool listens for errors only on idle clients. A backend terminated while this one is
  // checked out but between statements (idle in transaction) would emit an unhandled 'error' and
  // crash the process; the next query on the client fails anyway, so noting it is enough.
  let lost = false;
  const onError = () => {
    lost = true;
  };
  client.on('error', onError);
  let broken = false;
  let aborted = false;
  let rolledBack = false;
  const opening = deferBegin ? { begin, sent: false } : undefined;
  try {
    if (!opening) await client.query(begin);
    const value = await untilAborted(work(client, opening), abort, () => {
      aborted = true;
      // A statement in flight keeps its locks until it ends, closed connection or not (a wait for
      // another row's lock, a long query): cancel it from another connection.
      void pool
        .query('SELECT pg_cancel_backend($1)', [(client as { processID?: number }).processID])
        .catch(() => {});
    });
    if (!opening || opening.sent) {
      committing?.(true);
      let ended: pg.QueryResult;
      try {
        ended = await client.query('COMMIT');
      } catch (error) {
        committing?.(false);
        throw error;
      }
      // A statement of `work` failed and `work` caught the error: the server answers COMMIT with
      // ROLLBACK, not an error. Reporting success here had a job's completion, its caller's write
      // and the successors it handed off all "committed" with none of them in the database.
      if (ended.command === 'ROLLBACK') {
        committing?.(false);
        rolledBack = true;
        throw new SkiplockError(
          'rolled_back',
          'the transaction was rolled back, not committed: a statement in it failed and the ' +
            'error was caught inside the callback',
        );
      }
    }
    return value;
  } catch (error) {
    try {
      // Aborted, `work` may still have a statement on the connection, and a ROLLBACK would wait
      // behind it: closing the connection rolls back instead.
      if (!aborted && !rolledBack && (!opening || opening.sent)) await client.query('ROLLBACK');
    } catch {
      broken = true;
    }
    throw error;
  } finally {
    client.off('error', onError);
    // A connection whose ROLLBACK failed is in an unknown state; destroy it instead of reusing it.
    client.release(broken || lost || aborted);
  }
}

/** `work`, or a rejection with the abort's reason as soon as it comes (`onAbort` first). */
function untilAborted<T>(
  work: Promise<T>,
  abort: TransactionAbort | undefined,
  onAbort: () => void,
): Promise<T> {
  if (!abort) return work;
  return new Promise<T>((resolve, reject) => {
    const end = (reason: Error) => {
      onAbort();
      reject(reason);
    };
    if (abort.abortReason) return end(abort.abortReason);
    const remove = abort.onceAborted(end);
    work.then(
      (value) => {
        remove();
        resolve(value);
      },
      (error: unknown) => {
        remove();
        reject(error);
      },
    );
  });
}
