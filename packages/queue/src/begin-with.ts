import pg from 'pg';

/** What of node-postgres's connection this file writes with (the same calls `pg.Query` makes). */
interface WireConnection {
  parsedStatements?: Record<string, string>;
  stream: { cork?: () => void; uncork?: () => void };
  sync(): void;
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

/** A statement as `queryAfterBegin` sends it: named (prepared on this connection) or not. */
type Sent = { name?: string; text: string; values: unknown[] };

/**
 * `begin`, then the statements, as one write ending in one Sync: one round trip where
 * node-postgres, which waits for each statement's answer before it sends the next, takes one per
 * statement. All are in the extended protocol's one Sync block, so the server runs them in order
 * and skips the rest after an error, which leaves the transaction open and aborted, as separate
 * round trips would. The client gets the statements' answers only (`BEGIN`'s completion is not
 * passed on), all at once.
 */
class AfterBegin {
  private begun = false;
  /** The statement whose answer the server sends now. */
  private current = 0;
  private readonly results: unknown[] = [];
  private refused: Error | undefined;

  /**
   * Called once with the statements' outcome. node-postgres wraps it when the client has a
   * `query_timeout`, to clear its timer, so the inner queries report through it.
   */
  callback: (error: Error | undefined, results: unknown[] | undefined) => void;

  private readonly inner: QueryHandlers[];
  private readonly texts: string[];

  constructor(
    private readonly begin: string,
    statements: readonly Sent[],
    settle: (error: Error | undefined, results: unknown[] | undefined) => void,
  ) {
    this.callback = settle;
    this.texts = statements.map((s) => s.text);
    this.inner = statements.map((statement, i) => {
      // Extended mode even without parameters: a simple Query message would end the Sync block
      // (`queryMode` is node-postgres's, missing from its type declarations).
      const config = { ...statement, queryMode: 'extended' } as pg.QueryConfig;
      // A statement's success reports here at ReadyForQuery. A server error reports through
      // `handleError`; one of the statement's own before it is sent (a parameter that cannot be
      // serialized) here, and fails the whole at ReadyForQuery.
      return new pg.Query(config, (error: Error | undefined, result: unknown) => {
        if (error) this.refused ??= error;
        else this.results[i] = result;
      }) as unknown as QueryHandlers;
    });
  }

  /**
   * What the write sends, for whoever looks at a query's text (a statement counter): BEGIN and
   * the statements, one per line. node-postgres reads the text of a named query only.
   */
  get text(): string {
    return [this.begin, ...this.texts].join(';\n');
  }

  /** The client gives the first statement's result its type parsers through this. */
  get _result(): unknown {
    return this.inner[0]!._result;
  }

  submit(connection: WireConnection): Error | null {
    // `queryAfterBegin` ruled out what the statements' own submits refuse (a name parsed with
    // another text, values not an array), which would come after BEGIN is written.
    const types = (this.inner[0]!._result as { _types?: unknown } | undefined)?._types;
    for (const inner of this.inner.slice(1)) {
      const result = inner._result as { _types?: unknown } | undefined;
      if (result && types !== undefined) result._types = types;
    }
    // Each statement but the last writes its messages without the Sync that would end the block
    // (a view of the connection made only when there is more than one).
    const unsynced =
      this.inner.length > 1
        ? (Object.create(connection, { sync: { value: () => {} } }) as WireConnection)
        : connection;
    connection.stream.cork?.();
    try {
      // Unnamed and unparameterised: it replaces the unnamed statement, which nothing keeps.
      connection.parse({ text: this.begin });
      connection.bind({});
      connection.execute({});
      // Each writes its Bind, Describe and Execute (a Parse only when unnamed), the last a Sync.
      const last = this.inner.length - 1;
      for (const [i, inner] of this.inner.entries()) {
        const refused = inner.submit(i === last ? connection : unsynced);
        if (refused) return refused;
        // A parameter that could not be serialized (its `toPostgres` threw): node-postgres wrote a
        // Close instead of the statement, and the rest must not run without it. The Sync its
        // view swallowed ends the block here; the failure is reported at its ReadyForQuery.
        if (this.refused && i < last) {
          connection.sync();
          break;
        }
      }
      return null;
    } finally {
      connection.stream.uncork?.();
    }
  }

  handleCommandComplete(message: unknown, connection: WireConnection): void {
    if (!this.begun) {
      this.begun = true;
      return;
    }
    this.inner[this.current++]!.handleCommandComplete(message, connection);
  }

  handleRowDescription(message: unknown): void {
    this.inner[this.current]!.handleRowDescription(message);
  }

  handleDataRow(message: unknown): void {
    this.inner[this.current]!.handleDataRow(message);
  }

  handleEmptyQuery(connection: WireConnection): void {
    this.inner[this.current++]!.handleEmptyQuery(connection);
  }

  handlePortalSuspended(connection: WireConnection): void {
    this.inner[this.current]!.handlePortalSuspended(connection);
  }

  handleError(error: Error, _connection: WireConnection): void {
    // The server skipped the statements after the one that failed (or all, when BEGIN did); the
    // client reports no ReadyForQuery to a query that failed.
    this.callback(error, undefined);
  }

  handleReadyForQuery(connection: WireConnection): void {
    for (const inner of this.inner) inner.handleReadyForQuery(connection);
    if (this.refused) this.callback(this.refused, undefined);
    else this.callback(undefined, this.results);
  }

  handleCopyInResponse(connection: WireConnection): void {
    this.inner[this.current]!.handleCopyInResponse(connection);
  }

  handleCopyData(message: unknown, connection: WireConnection): void {
    this.inner[this.current]!.handleCopyData(message, connection);
  }
}

/**
 * Sends `begin` and `statements` on `client` in one round trip (see `AfterBegin`) and answers
 * their results in order, or answers null when it cannot and the caller sends them one after the
 * other: a client that is not node-postgres's own JavaScript client, one in binary mode or in
 * node-postgres's pipeline mode (which refuses custom queries), or a named statement this
 * connection has not parsed yet (its first Parse goes the usual way, so the client's record of
 * what the connection has parsed stays exact when that Parse fails).
 */
export function queryAfterBegin<T extends pg.QueryResultRow>(
  client: pg.ClientBase,
  begin: string,
  statements: readonly [Sent, ...Sent[]],
): Promise<pg.QueryResult<T>[]> | null {
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
    typeof connection.sync !== 'function' ||
    !connection.stream ||
    statements.some(
      (s) =>
        !Array.isArray(s.values) ||
        (s.name !== undefined && connection.parsedStatements?.[s.name] !== s.text),
    )
  ) {
    return null;
  }
  return new Promise<pg.QueryResult<T>[]>((resolve, reject) => {
    const query = new AfterBegin(begin, statements, (error, results) =>
      error ? reject(error) : resolve(results as pg.QueryResult<T>[]),
    );
    client.query(query as unknown as pg.Submittable);
  }).catch((error: unknown) => {
    // As node-postgres does for its own promises: a stack that leads back to the caller, not
    // to the socket's read.
    if (error instanceof Error) Error.captureStackTrace(error);
    throw error;
  });
}
