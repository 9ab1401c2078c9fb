import pg from 'pg';

/** What of node-postgres's connection this file writes with (the same calls `pg.Query` makes). */
interface WireConnection {
  parsedStatements?: Record<string, string>;
  stream: { cork?: () => void; uncork?: () => void };
  parse(message: { text: string }): void;
  bind(message: object): void;
  execute(message: object): void;
}

/** The message handlers node-postgres's client calls on the query it is waiting for. */
interface QueryHandlers {
  submit(connection: WireConnection): Error | null | undefined;
  handleRowDescription(message: unknown): void;
  handleDataRow(message: unknown): void;
  handleCommandComplete(message: unknown, connection: WireConnection): void;
  handleEmptyQuery(connection: WireConnection): void;
  handlePortalSuspended(connection: WireConnection): void;
  handleError(error: Error, connection: WireConnection): void;
  handleReadyForQuery(connection: WireConnection): void;
  handleCopyInResponse(connection: WireConnection): void;
  handleCopyData(message: unknown, connection: WireConnection): void;
  _result?: unknown;
}

/**
 * `begin`, then the statement, as one write ending in one Sync: one round trip where node-postgres,
 * which waits for each statement's answer before it sends the next, takes two. Both are in the
 * extended protocol's one Sync block, so the server runs them in order; an error in the statement
 * leaves the transaction open and aborted, as after two round trips. The client gets the
 * statement's answer only (`BEGIN`'s completion is not passed on).
 */
class AfterBegin {
  private begun = false;

  /**
   * Called once with the statement's outcome. node-postgres wraps it when the client has a
   * `query_timeout`, to clear its timer, so the inner query reports through it.
   */
  callback: (error: Error | undefined, result: unknown) => void;

  private readonly inner: QueryHandlers;

  constructor(
    private readonly begin: string,
    statement: { name?: string; text: string; values: unknown[] },
    settle: (error: Error | undefined, result: unknown) => void,
  ) {
    this.callback = settle;
    // Extended mode even without parameters: a simple Query message would end the Sync block
    // (`queryMode` is node-postgres's, missing from its type declarations).
    const config = { ...statement, queryMode: 'extended' } as pg.QueryConfig;
    this.inner = new pg.Query(config, (error: Error | undefined, result: unknown) =>
      this.callback(error, result),
    ) as unknown as QueryHandlers;
  }

  /** The client gives the statement's result its type parsers through this. */
  get _result(): unknown {
    return this.inner._result;
  }

  submit(connection: WireConnection): Error | null {
    // `queryAfterBegin` ruled out what the statement's own submit refuses (a name parsed with
    // another text, values not an array), which would come after BEGIN is written.
    connection.stream.cork?.();
    try {
      // Unnamed and unparameterised: it replaces the unnamed statement, which nothing keeps.
      connection.parse({ text: this.begin });
      connection.bind({});
      connection.execute({});
      // Writes the statement's Bind, Describe, Execute and Sync (a Parse only when unnamed).
      return this.inner.submit(connection) ?? null;
    } finally {
      connection.stream.uncork?.();
    }
  }

  handleCommandComplete(message: unknown, connection: WireConnection): void {
    if (!this.begun) {
      this.begun = true;
      return;
    }
    this.inner.handleCommandComplete(message, connection);
  }

  handleRowDescription(message: unknown): void {
    this.inner.handleRowDescription(message);
  }

  handleDataRow(message: unknown): void {
    this.inner.handleDataRow(message);
  }

  handleEmptyQuery(connection: WireConnection): void {
    this.inner.handleEmptyQuery(connection);
  }

  handlePortalSuspended(connection: WireConnection): void {
    this.inner.handlePortalSuspended(connection);
  }

  handleError(error: Error, connection: WireConnection): void {
    this.inner.handleError(error, connection);
  }

  handleReadyForQuery(connection: WireConnection): void {
    this.inner.handleReadyForQuery(connection);
  }

  handleCopyInResponse(connection: WireConnection): void {
    this.inner.handleCopyInResponse(connection);
  }

  handleCopyData(message: unknown, connection: WireConnection): void {
    this.inner.handleCopyData(message, connection);
  }
}

/**
 * Sends `begin` and `statement` on `client` in one round trip (see `AfterBegin`), or answers
 * null when it cannot and the caller sends them one after the other: a client that is not
 * node-postgres's own JavaScript client, one in binary mode or in node-postgres's pipeline mode
 * (which refuses custom queries), or a named statement this connection has not parsed yet (its
 * first Parse goes the usual way, so the client's record of what the connection has parsed stays
 * exact when that Parse fails).
 */
export function queryAfterBegin<T extends pg.QueryResultRow>(
  client: pg.ClientBase,
  begin: string,
  statement: { name?: string; text: string; values: unknown[] },
): Promise<pg.QueryResult<T>> | null {
  const wire = client as unknown as {
    connection?: Partial<WireConnection>;
    binary?: boolean;
    pipeline?: boolean;
  };
  const connection = wire.connection;
  if (
    !connection ||
    wire.binary === true ||
    wire.pipeline === true ||
    typeof connection.parse !== 'function' ||
    typeof connection.bind !== 'function' ||
    typeof connection.execute !== 'function' ||
    !connection.stream ||
    (statement.name !== undefined &&
      connection.parsedStatements?.[statement.name] !== statement.text)
  ) {
    return null;
  }
  return new Promise<pg.QueryResult<T>>((resolve, reject) => {
    const query = new AfterBegin(begin, statement, (error, result) =>
      error ? reject(error) : resolve(result as pg.QueryResult<T>),
    );
    client.query(query as unknown as pg.Submittable);
  }).catch((error: unknown) => {
    // As node-postgres does for its own promises: a stack that leads back to the caller, not
    // to the socket's read.
    if (error instanceof Error) Error.captureStackTrace(error);
    throw error;
  });
}
