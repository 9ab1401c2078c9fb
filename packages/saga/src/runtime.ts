import {
  createClient,
  type AnyJobDefinition,
  type Client,
  type Logger,
  type TracingOption,
  type Worker,
} from '@skiplock/queue';
import {
  cancelQueuedJob,
  createDefaultLogger,
  inSpan,
  lockWaitOf,
  namedStatement,
  lendsSlots,
  openLocalHandOff,
  preparedRunner,
  resolvePool,
  resolveTracer,
  runSql,
  sendOpening,
  storedTrace,
  withOwnTransaction,
  type Opening,
  type Queryable,
} from '@skiplock/queue/engine';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import type pg from 'pg';
import { branchIdOf } from './branch.js';
import type { AnySagaDefinition, SagaDefinition, StepSpec } from './define.js';
import { DEADLINE_RULE, isDeadlineMs } from './define.js';
import type { StepOutputs } from './step.js';
import { entryKey, SagaSnapshot, type Engine, type FaultHook, type SagaEntry } from './engine.js';
import { Notices } from './notices.js';
import { keyId, MAX_KEY_ID_LENGTH, MAX_SAGA_ID_CHARS, SAGA_ID_UNFIT } from './keys.js';
import {
  ChildSagasError,
  SagaError,
  SagaInputMismatchError,
  SagaLockedError,
  SagaNotFoundError,
  SagaValidationError,
  UnknownSagaError,
} from './errors.js';
import { buildEntry } from './handlers.js';
import { ACTIVE, joinBranches } from './parallel.js';
import { createSagaMetrics, type SagaMetrics, type SagaMetricsOption } from './metrics.js';
import { createReconciler, type Reconciler, type ReconcilerOptions } from './reconciler.js';
import { readSaga, readSagas, type SagaList, type SagaListOptions, type SagaView } from './read.js';
import type { SagaStatus, SagaStepKind } from './schema.js';
import { keyHeldByOther, lockHolder, lockKeyOf, takeKeyTurn } from './lock.js';
import {
  insertSaga,
  lockSaga,
  lockSagaIfFree,
  reopenSaga,
  selectBranches,
  selectStartConflict,
  setSagaFlags,
  type BranchRow,
  type SagaRow,
  type StartConflictRow,
} from './sql/sagas.js';
import { selectSaga } from './sql/read.js';
import { selectSagaKey, setLockWait, type SagaKeyRow } from './sql/locks.js';
import { consumeSignal, insertSignal, selectSignal } from './sql/signals.js';
import { selectHistory, settleStep, type HistoryRow } from './sql/steps.js';
import { issuesAt, storedJsonIssues, validate } from './standard.js';
import { waitExpired } from './wait-expired.js';
import {
  advanceAfter,
  compensateNext,
  enterStep,
  OUTCOMES,
  endSaga,
  childIdOf,
  resumeEndedChild,
  type Transition,
} from './transitions.js';
import { inSagaTrace, SAGA_TRACER, startSagaSpan } from './tracing.js';

export interface SagaRuntimeOptions {
  /** The database; or give `connectionString` (or set DATABASE_URL). */
  pool?: pg.Pool | undefined;
  connectionString?: string | undefined;
  /** The queue client to enqueue with (default: one made on the same pool). */
  client?: Client | undefined;
  /** Every definition this process runs, including older versions still in flight. */
  sagas: readonly AnySagaDefinition[];
  logger?: Logger | undefined;
  reconciler?: ReconcilerOptions | undefined;
  /**
   * Where saga outcomes are counted: a prom-client `Registry`, best the one given to
   * `createWorker({ metrics })` so one scrape serves both. Default: a registry of the runtime's own.
   */
  metrics?: SagaMetricsOption | undefined;
  /** Crash injection for `@skiplock/saga/testing`; leave unset in production. */
  faults?: FaultHook | undefined;
  /**
   * Send the saga's statements (and, when the runtime makes its client, enqueues) as named
   * prepared statements (default true). Turn off behind PgBouncer in transaction mode before 1.21
   * or with `max_prepared_statements = 0`, and give a `client` made with the same setting. Left
   * on there, the first failure turns them off (reason `prepared_statements_off`) and the
   * transaction it happened in is run again when it is skiplock's own (a step's completion;
   * `start`, `signal`, `cancel` without your `tx`); in your transaction, the call fails. A step's
   * `ctx.transaction` work runs again with it; when it returns another result than the one the
   * step already has, the attempt fails with `transaction_rerun` and the step runs again.
   * The saga's lock that a step's completing transaction sends with the job's fence goes as the
   * worker's `preparedStatements` says: give the worker the same setting.
   */
  preparedStatements?: boolean | undefined;
  /**
   * OpenTelemetry: a saga is one trace, from its start span through a span per step, compensation,
   * signal and cancel (default true: the global tracer provider, a no-op until an SDK registers
   * one; `{ tracerProvider }` for another; `false` for none). A runtime-made client traces alike;
   * a given `client` keeps its own setting.
   */
  tracing?: TracingOption;
}

export interface StartOptions<I> {
  /** Caller-chosen id: starting twice with the same id is one saga. */
  id: string;
  input: I;
  /** Join this transaction (a pg client inside BEGIN, or a drizzle transaction). */
  tx?: Queryable | undefined;
  /** Overrides the definition's `deadlineMs` for this saga (1 ms to ten years). */
  deadlineMs?: number | undefined;
}

export interface StartResult {
  id: string;
  /**
   * False when a saga with this id already existed; nothing new was started. True also for a saga
   * queued behind its lock key (status `queued`).
   */
  started: boolean;
  status: SagaStatus;
}

export interface SignalResult {
  /** False when a signal of this name was delivered before; this one was ignored. */
  delivered: boolean;
  /** True when a step waiting for it moved the saga on in this call. */
  resumed: boolean;
}

export interface CancelResult {
  /** True when the saga is compensating (or will, once its running step settles). */
  accepted: boolean;
  status: SagaStatus;
  /** Why a cancel was not accepted: `finished`, `pivoted` or `compensating`. */
  reason?: 'finished' | 'pivoted' | 'compensating' | undefined;
}

export interface RetryResult {
  /**
   * True when the failed step's (or compensation's) job runs again and the saga goes on; for a
   * wait after the pivot that timed out: the saga waits again (with no timeout), or goes on at
   * once with a signal that arrived meanwhile.
   */
  retried: boolean;
  step?: string | undefined;
  kind?: SagaStepKind | undefined;
  /**
   * Why nothing was retried: `not_failed` (the saga is not `failed`), `no_failed_step` (it failed
   * for another reason: no worker knew its version, or a foreign job held its key), `job_gone`
   * (retention removed the dead job, or it is no longer dead), `invalid_signal` (the wait's stored
   * signal no longer passes its schema: the definition changed without a new version),
   * `lock_busy` (the saga has a lock key and another saga of its definition holds it now),
   * `in_progress` (the child saga or a parallel branch whose undo failed is being retried now).
   * For a parallel step's compensation, `retried` is true only when every failed branch runs
   * again; `reason` is then the first refusal among them.
   */
  reason?:
    | 'not_failed'
    | 'no_failed_step'
    | 'job_gone'
    | 'invalid_signal'
    | 'lock_busy'
    | 'in_progress'
    | undefined;
}

/** Options of an operator's action on a saga (`cancel`, `retryFailed`, `signal`). */
export interface SagaActionOptions {
  /**
   * Each time the action waits for a lock another transaction holds (the saga's row, its lock
   * key's turn, its job's row: a step's completing transaction, a producer's `start` or `signal`
   * in its own open transaction, another operator's action), waits at most this long (ms, 1 to an
   * hour), then throws `SagaError` `saga_busy`, having changed nothing; by default it waits as
   * long as the holder does. An action waits for a few such locks at most, one after the other.
   * A child saga's or a branch's cancel or retry, in a transaction of its own after the parent's
   * committed, is bounded so too, and one that runs out is reported in `ChildSagasError`. Not
   * with `tx`.
   */
  lockWaitMs?: number | undefined;
}

export interface SagaRuntime {
  /** Job definitions to pass to `createWorker({ jobs })` (with any jobs of your own). */
  readonly jobs: readonly AnyJobDefinition[];
  readonly reconciler: Reconciler;
  /** `skiplock_saga_outcomes_total{saga,step,outcome}` and `skiplock_sagas_reconciled_total`. */
  readonly metrics: SagaMetrics;
  /**
   * Hands the first step of each saga this runtime starts without your `tx` to `worker`, a worker
   * of this process given this runtime's `jobs`, when it has a free slot: the step's job is
   * inserted already leased to it and starts as soon as the start commits (no NOTIFY, poll or
   * claim), with the saga as the start wrote it (no read). Otherwise, and for starts in your
   * transaction (whose commit the runtime does not see), the step is enqueued for any worker. A
   * crash before it ran leaves an ordinary expired lease for the sweeper. Call it after
   * `createWorker({ jobs: runtime.jobs })`; a later call replaces the worker. Anything but a
   * worker made by `createWorker` is refused with a TypeError.
   */
  attachWorker(worker: Worker): void;
  start<S extends StandardSchemaV1, O extends StepOutputs>(
    definition: SagaDefinition<string, S, O>,
    options: StartOptions<StandardSchemaV1.InferInput<S>>,
  ): Promise<StartResult>;
  /**
   * Delivers a named signal once (later deliveries of the name are ignored) and resumes the saga
   * if a step waits for it. With `tx` it joins the caller's transaction (for example a step's
   * `ctx.transaction`), so the signal commits or rolls back with the caller's writes.
   */
  signal(
    sagaId: string,
    name: string,
    payload: unknown,
    options?: { tx?: Queryable | undefined } & SagaActionOptions,
  ): Promise<SignalResult>;
  cancel(sagaId: string, options?: SagaActionOptions): Promise<CancelResult>;
  /**
   * An operator's retry of a `failed` saga: the step past the pivot or the compensation that
   * failed for good runs again (its dead job retried with fresh attempts, in one transaction with
   * the saga's return to `running` or `compensating`), and the saga goes on from there. For the
   * compensation of a child step, the child's own failed compensation runs again, as
   * `retryFailed(child)` would (or, with the child still `completed`, this saga's dead job that
   * reopens it); for a parallel step's, that of every failed branch. A saga with
   * a lock key goes on only while no other saga holds the key (`lock_busy` otherwise).
   */
  retryFailed(sagaId: string, options?: SagaActionOptions): Promise<RetryResult>;
  getSaga(id: string): Promise<SagaView | null>;
  listSagas(options?: SagaListOptions): Promise<SagaList>;
  /** Stops the reconciler loop and closes what the runtime created (not a pool you passed). */
  close(): Promise<void>;
}

const TERMINAL: ReadonlySet<SagaStatus> = new Set([
  'completed',
  'compensated',
  'cancelled',
  'failed',
]);
/** The `step` label of a saga cancelled while queued: it ended before reaching any step. */
const QUEUED_STEP = '(queued)';

/** Saga ids: 1-200 characters, no whitespace or control characters, short enough for job keys. */
function checkSagaId(id: unknown): string {
  const refuse = (message: string): never => {
    throw new SagaValidationError('invalid_id', 'saga id', [{ path: 'id', message }]);
  };
  if (typeof id !== 'string') return refuse(`must be a string, got ${typeof id}`);
  if (id.length === 0) return refuse('must not be empty');
  const chars = [...id].length;
  if (chars > MAX_SAGA_ID_CHARS) {
    return refuse(`must be at most ${MAX_SAGA_ID_CHARS} characters, got ${chars}`);
  }
  if (SAGA_ID_UNFIT.test(id)) {
    return refuse(`must not contain whitespace or control characters, got ${JSON.stringify(id)}`);
  }
  const encoded = keyId(id).length;
  if (encoded > MAX_KEY_ID_LENGTH) {
    return refuse(
      `must be at most ${MAX_KEY_ID_LENGTH} characters once encoded for its job keys (%, : and non-ASCII characters take 3 per UTF-8 byte), got ${encoded}`,
    );
  }
  return id;
}

/**
 * The ids of the child sagas a saga with `id` may start (`<id>/<step>`, and theirs in turn),
 * each checked as a saga id, so that a start whose children could not be started or looked up
 * is refused up front, naming the child id.
 */
function checkChildIds(def: AnySagaDefinition, id: string): void {
  for (const step of def.steps) {
    const starts = step.child
      ? [{ childId: childIdOf(id, step.name), def: step.child.def }]
      : (step.parallel?.branches ?? []).map((b) => ({
          childId: branchIdOf(id, step.name, b.name),
          def: b.def,
        }));
    for (const { childId, def: child } of starts) {
      try {
        checkSagaId(childId);
      } catch (error) {
        const why = error instanceof SagaValidationError ? error.issues[0]!.message : String(error);
        throw new SagaValidationError('invalid_id', 'saga id', [
          { path: 'id', message: `its child saga id "${childId}" (step "${step.name}") ${why}` },
        ]);
      }
      checkChildIds(child, childId);
    }
  }
}

/** How many times a cancel starts over when its saga entered or left its key's queue meanwhile. */
const MAX_CANCEL_TRIES = 20;

/** The definitions a step starts as child sagas: its child's, or its parallel branches'. */
const childrenOf = (step: StepSpec): { def: AnySagaDefinition }[] =>
  step.child ? [step.child] : [...(step.parallel?.branches ?? [])];

/**
 * Runs `act` for every child saga id, whichever throws: what each returned, and the ids that
 * threw with their errors.
 */
async function eachChild<T>(
  ids: readonly string[],
  act: (id: string) => Promise<T>,
): Promise<{ done: T[]; refused: { sagaId: string; error: unknown }[] }> {
  const done: T[] = [];
  const refused: { sagaId: string; error: unknown }[] = [];
  for (const sagaId of ids) {
    try {
      done.push(await act(sagaId));
    } catch (error) {
      refused.push({ sagaId, error });
    }
  }
  return { done, refused };
}

export function createSagaRuntime(options: SagaRuntimeOptions): SagaRuntime {
  if (!Array.isArray(options?.sagas) || options.sagas.length === 0) {
    throw new TypeError('createSagaRuntime: `sagas` must list at least one saga definition');
  }
  const logger = options.logger ?? createDefaultLogger('skiplock-saga');
  const given = options.pool ?? options.client?.pool;
  if (!given && !options.connectionString && !process.env.DATABASE_URL) {
    throw new TypeError('createSagaRuntime: pass a pool, a client or a connectionString');
  }
  // The queue's own pool set-up: error listeners on the pool and on every client it hands out.
  const owned = resolvePool(
    { pool: given, connectionString: options.connectionString },
    logger,
    'saga',
  );
  const pool = owned.pool;
  const preparedStatements = options.preparedStatements ?? true;
  const client =
    options.client ??
    createClient({ pool, logger, preparedStatements, tracing: options.tracing ?? true });
  const entries = new Map<string, SagaEntry>();
  const run = preparedRunner({
    enabled: preparedStatements,
    pool,
    logger,
    who: 'the saga runtime',
  });
  const engine: Engine = {
    pool,
    client,
    sql: (tx, query, opening) => run(tx, namedStatement('skiplock_saga', query), opening),
    statement: (query) => namedStatement('skiplock_saga', query),
    logger,
    metrics: createSagaMetrics(options.metrics),
    entries,
    faults: options.faults ?? null,
    tracer: resolveTracer(options.tracing, 'saga runtime options', SAGA_TRACER),
    notices: new Notices(),
  };
  for (const def of options.sagas) {
    const key = entryKey(def.name, def.version);
    if (entries.has(key)) {
      throw new TypeError(
        `createSagaRuntime: saga "${def.name}" version ${def.version} is listed twice`,
      );
    }
    if (def.steps.length === 0) {
      throw new TypeError(
        `createSagaRuntime: saga "${def.name}" version ${def.version} has no steps`,
      );
    }
    entries.set(key, buildEntry(engine, def));
  }
  // Child sagas run where their parents do: registered with them, unless listed already.
  const children = [...entries.values()].flatMap((e) => e.steps.flatMap(childrenOf));
  while (children.length > 0) {
    const child = children.pop()!.def;
    const key = entryKey(child.name, child.version);
    const known = entries.get(key);
    if (known && known.def !== child) {
      throw new TypeError(
        `createSagaRuntime: saga "${child.name}" version ${child.version} is used as a child but a different definition of it is listed`,
      );
    }
    if (known) continue;
    const entry = buildEntry(engine, child);
    entries.set(key, entry);
    children.push(...entry.steps.flatMap(childrenOf));
  }
  const jobs = [...entries.values()].flatMap((e) =>
    [...e.runJobs, ...e.compensateJobs, ...e.timeoutJobs].filter(
      (j): j is AnyJobDefinition => j !== null,
    ),
  );
  const reconciler = createReconciler(engine, options.reconciler);

  function entryOf(name: string, version: number): SagaEntry {
    const entry = entries.get(entryKey(name, version));
    if (!entry) throw new UnknownSagaError(name, version);
    return entry;
  }

  function report(saga: SagaRow, step: string, transition: Transition, why: string) {
    if (!OUTCOMES.has(transition)) return;
    engine.metrics.outcomes.inc({ saga: saga.name, step, outcome: transition });
    logger.warn(
      { sagaId: saga.id, saga: saga.name, reason: `saga_${transition}`, why },
      `saga ${transition}`,
    );
  }

  /** A transaction of the runtime's own, run again if a pooler lost a prepared statement. */
  const ownTransaction = <T>(
    work: (tx: Queryable, opening: Opening | undefined) => Promise<T>,
    options?: { opening?: boolean },
  ) => withOwnTransaction(pool, work, options);

  /**
   * An operator's action in a transaction of its own, its lock waits bounded by `waitMs` (see
   * `SagaActionOptions`): one that runs out rolls it back and is thrown as `saga_busy`.
   */
  async function actionTransaction<T>(
    sagaId: string,
    waitMs: number | null,
    work: (tx: Queryable) => Promise<T>,
  ): Promise<T> {
    if (waitMs === null) return ownTransaction(work);
    try {
      return await ownTransaction(async (tx) => {
        await runSql(tx, setLockWait(waitMs));
        return work(tx);
      });
    } catch (error) {
      if ((error as { code?: unknown } | null)?.code !== '55P03') throw error;
      throw new SagaError(
        'saga_busy',
        `saga "${sagaId}": a lock it needs (its row, its lock key's turn, its job's row) is held by another transaction (a step's completing transaction, a producer's start or signal in its open transaction, another operator's action); waited ${waitMs} ms for it and changed nothing: try again`,
        { cause: error },
      );
    }
  }

  async function lock(tx: Queryable, id: string): Promise<SagaRow> {
    const saga = (await engine.sql<SagaRow>(tx, lockSaga(id))).rows[0];
    if (!saga) throw new SagaNotFoundError(id);
    return saga;
  }

  let localWorker: Worker | null = null;

  const runtime: SagaRuntime = {
    jobs,
    reconciler,
    metrics: engine.metrics,

    attachWorker(worker) {
      if (!lendsSlots(worker)) {
        const got = worker === null ? 'null' : Array.isArray(worker) ? 'an array' : typeof worker;
        throw new TypeError(
          `attachWorker: expected a worker made by createWorker() of @skiplock/queue, got ${got}` +
            (got === 'object'
              ? ' (a worker of a second installed copy of @skiplock/queue is not one)'
              : ''),
        );
      }
      localWorker = worker;
    },

    async start(definition, startOptions) {
      const id = checkSagaId(startOptions?.id);
      // Refused for new sagas only (one already stored stays readable): a URL path resolves these
      // segments away, so no page or link could address such a saga (the dashboard's link to
      // `..` opened its overview; found by an audit).
      if (id === '.' || id === '..') {
        throw new SagaValidationError('invalid_id', 'saga id', [
          { path: 'id', message: `must not be "." or "..", which no URL path can hold` },
        ]);
      }
      const entry = entryOf(definition.name, definition.version);
      checkChildIds(entry.def, id);
      if (entry.def !== (definition as AnySagaDefinition)) {
        throw new SagaError(
          'saga_mismatch',
          `saga "${definition.name}" version ${definition.version} given to start() is not the definition this runtime registered`,
        );
      }
      const parsed = await validate(definition.input, startOptions.input);
      if (parsed.issues) {
        const found = issuesAt('input', parsed.issues);
        logger.warn(
          { reason: 'invalid_input', saga: definition.name, fields: found.map((i) => i.path) },
          'saga start refused',
        );
        throw new SagaValidationError('invalid_input', `input of saga "${definition.name}"`, found);
      }
      // Stored as JSON: refuse what JSON or jsonb cannot hold as given, naming where, before SQL.
      const inputIssues = await storedJsonIssues(definition.input, startOptions.input, 'input');
      if (inputIssues) {
        throw new SagaValidationError(
          'invalid_input',
          `input of saga "${definition.name}"`,
          inputIssues,
        );
      }
      const deadlineMs = startOptions.deadlineMs ?? definition.deadlineMs;
      if (deadlineMs !== null && !isDeadlineMs(deadlineMs)) {
        throw new SagaError('invalid_deadline', `${DEADLINE_RULE}, got ${deadlineMs}`);
      }
      // The caller's input is stored, not the parsed output, so every step parses it alike.
      const inputJson = JSON.stringify(startOptions.input ?? null);
      const saga = { id, name: definition.name, version: definition.version };
      // Before the span starts: a refused key ends the call with nothing open.
      const lockKey = definition.lock && lockKeyOf(definition, definition.lock, parsed.value);
      const span = engine.tracer && startSagaSpan(engine.tracer, saga);
      const stored = span && storedTrace(span);
      const conflict = async (tx: Queryable) =>
        (await runSql<StartConflictRow>(tx, selectStartConflict(id, inputJson))).rows[0];
      // A start whose id is taken: the same saga asked for again, or a conflict.
      const repeated = (existing: StartConflictRow | undefined): StartResult => {
        if (!existing) {
          throw new SagaError(
            'saga_id_conflict',
            `saga "${id}" conflicted but is not visible; retry`,
          );
        }
        if (existing.name !== definition.name) {
          throw new SagaError(
            'saga_id_conflict',
            `saga id "${id}" is already used by a saga "${existing.name}"`,
          );
        }
        // A repeated start is only a no-op when it asks for the same saga; a different input
        // would otherwise be dropped without a word.
        if (!existing.same_input) throw new SagaInputMismatchError(id, existing.status);
        return { id, started: false, status: existing.status };
      };
      // `opening`: in a transaction of the runtime's own, its BEGIN goes with the saga's insert.
      const work = async (tx: Queryable, opening?: Opening): Promise<StartResult> => {
        // Rows inserted leased by an earlier try of this transaction were rolled back with it.
        lent?.retry();
        const fields = { ...saga, inputJson, deadlineMs, trace: stored };
        let status: 'running' | 'queued' = 'running';
        if (lockKey !== null) {
          await sendOpening(tx as pg.PoolClient, opening);
          const holder = await lockHolder(tx, definition.name, lockKey);
          if (holder && holder.id !== id && definition.lock!.whenLocked === 'refuse') {
            const existing = await conflict(tx);
            if (!existing) throw new SagaLockedError(definition.name, holder.id);
            return repeated(existing);
          }
          if (holder) status = 'queued';
        }
        const inserted = await engine.sql<SagaRow>(
          tx,
          insertSaga({
            ...(lockKey === null ? fields : { ...fields, lock: { key: lockKey, status } }),
            returnRow: lent !== null,
          }),
          opening,
        );
        if (inserted.rowCount === 0) return repeated(await conflict(tx));
        if (status === 'running') {
          const row = inserted.rows[0];
          // Handed to the local worker, the first step gets the saga as inserted, with no output.
          const carry =
            lent &&
            row &&
            new SagaSnapshot(row, {}, performance.now()).next(entry.steps[0]!.name, false);
          const handing = lent ? { ...engine, handOff: lent } : engine;
          await enterStep(handing, tx, entry, id, 0, carry ?? undefined);
        }
        return { id, started: true, status };
      };
      // Only a transaction of the runtime's own: it sees the commit, after which the step starts.
      const lent = !startOptions.tx && localWorker ? openLocalHandOff(localWorker) : null;
      let result: StartResult;
      try {
        result = await inSpan(
          span,
          () => (startOptions.tx ? work(startOptions.tx) : ownTransaction(work, { opening: true })),
          (done, value) => done.setAttribute('skiplock.saga.started', value.started),
        );
        lent?.committed();
      } finally {
        lent?.close();
      }
      if (result.started) {
        logger.info(
          {
            reason: result.status === 'queued' ? 'saga_queued' : 'saga_started',
            sagaId: id,
            saga: definition.name,
            version: definition.version,
          },
          result.status === 'queued' ? 'saga queued behind its lock key' : 'saga started',
        );
      }
      return result;
    },

    async signal(sagaId, name, payload, signalOptions = {}) {
      checkSagaId(sagaId);
      const waitMs = lockWaitOf(signalOptions);
      let expired = false;
      const work = async (tx: Queryable): Promise<SignalResult> => {
        expired = false; // a transaction run again starts over
        const saga = await lock(tx, sagaId);
        const entry = entryOf(saga.name, saga.version);
        const spec = entry.signals.get(name);
        if (!spec) {
          const known = [...entry.signals.keys()].join(', ') || 'none';
          throw new SagaError(
            'unknown_signal',
            `saga "${saga.name}" version ${saga.version} waits for no signal "${name}" (it waits for: ${known})`,
          );
        }
        const parsed = await validate(spec.wait!.payload, payload);
        if (parsed.issues) {
          const found = issuesAt('payload', parsed.issues);
          logger.warn(
            { reason: 'invalid_signal', sagaId, signal: name, fields: found.map((i) => i.path) },
            'signal refused',
          );
          throw new SagaValidationError('invalid_signal', `signal "${name}"`, found);
        }
        const payloadIssues = await storedJsonIssues(spec.wait!.payload, payload, 'payload');
        if (payloadIssues) {
          throw new SagaValidationError('invalid_signal', `signal "${name}"`, payloadIssues);
        }
        const stored = await runSql(
          tx,
          insertSignal(sagaId, name, JSON.stringify(payload ?? null)),
        );
        if (stored.rowCount === 0) return { delivered: false, resumed: false };
        if (saga.status !== 'waiting' || saga.current_step !== spec.name) {
          return { delivered: true, resumed: false };
        }
        expired = await waitExpired(tx, entry, sagaId, spec.index);
        if (expired) return { delivered: true, resumed: false };
        await runSql(tx, consumeSignal(sagaId, name));
        const output = JSON.parse(JSON.stringify(parsed.value ?? null)) as unknown;
        const transition = await inSagaTrace(engine.tracer, saga, `signal ${name}`, () =>
          advanceAfter(engine, tx, entry, saga, spec.index, output),
        );
        report(saga, spec.name, transition, 'signal');
        return { delivered: true, resumed: true };
      };
      const result = signalOptions.tx
        ? await work(signalOptions.tx)
        : await actionTransaction(sagaId, waitMs, work);
      // Logged once the work is done, so a transaction run again does not log twice.
      if (result.delivered) {
        logger.info({ reason: 'signal_received', sagaId, signal: name }, 'signal received');
      }
      if (expired) {
        logger.info(
          { reason: 'signal_after_timeout', sagaId, signal: name },
          'signal arrived after its wait timed out; stored, and the wait fails',
        );
      }
      return result;
    },

    async cancel(sagaId, cancelOptions = {}) {
      checkSagaId(sagaId);
      const waitMs = lockWaitOf(cancelOptions);
      let children: string[] = [];
      // Run again when the saga left the queue (or appeared in it) between the read and the lock.
      const AGAIN = Symbol('again');
      const once = async (tx: Queryable): Promise<CancelResult | typeof AGAIN> => {
        // The holder's end takes its key's turn lock, then the row of the next saga queued for
        // the key, to start it (`startNextInLine`): so, for a saga that looks queued, the turn
        // first, then the row (the other way round each waited for the other and PostgreSQL
        // aborted one, the cancel). Read without a lock: name and key never change, and only a
        // turn (held here from then on) or a cancel (that takes it too) takes a saga out of the
        // queue.
        const seen = (await engine.sql<SagaKeyRow>(tx, selectSagaKey(sagaId))).rows[0];
        let turn = false;
        let saga: SagaRow | undefined;
        if (seen?.status === 'queued' && seen.lock_key !== null) {
          await takeKeyTurn(tx, seen.name, seen.lock_key);
          turn = true;
          const now = (await engine.sql<SagaKeyRow>(tx, selectSagaKey(sagaId))).rows[0];
          // Started by the holder's end meanwhile: it holds the key now, and its own end takes
          // its row, then the turn, so its row is taken here only if free (else start over
          // without the turn), never waited for.
          if (now?.status !== 'queued') {
            saga = (await engine.sql<SagaRow>(tx, lockSagaIfFree(sagaId))).rows[0];
            if (!saga) return AGAIN;
          }
        }
        saga ??= await lock(tx, sagaId);
        if (saga.status === 'queued' && saga.lock_key !== null && !turn) return AGAIN;
        if (TERMINAL.has(saga.status)) {
          return { accepted: false, status: saga.status, reason: 'finished' };
        }
        if (saga.status === 'compensating') {
          return { accepted: false, status: saga.status, reason: 'compensating' };
        }
        if (saga.status === 'queued') {
          // Nothing ran and it holds no key: it just leaves the queue. No definition needed, so
          // a queued saga of a version no runtime knows any more can be cancelled too.
          // Ahead of the others with no holder (its version unknown where the last one ended),
          // its end starts the next one now, as any end does.
          await endSaga(engine, tx, sagaId, 'cancelled', 'cancelled');
          report(saga, QUEUED_STEP, 'cancelled', 'cancel');
          return { accepted: true, status: 'cancelled' };
        }
        if (saga.pivoted) return { accepted: false, status: saga.status, reason: 'pivoted' };
        const entry = entryOf(saga.name, saga.version);
        const index = entry.steps.findIndex((s) => s.name === saga.current_step);
        if (index === -1) {
          // Compensating from no step would undo nothing and call the saga cancelled.
          throw new SagaError(
            'step_not_in_definition',
            `saga "${sagaId}" is at step "${saga.current_step}", which version ${saga.version} of ` +
              `saga "${saga.name}" does not have (renamed without a new version?); ` +
              'register the definition it was started with to cancel it',
          );
        }
        const step = saga.current_step!;
        const flagged = { ...saga, cancel_requested: true };
        await runSql(tx, setSagaFlags(sagaId, { cancelRequested: true, error: 'cancelled' }));
        const spec = entry.steps[index];
        if (saga.status === 'waiting' && (spec?.child || spec?.parallel)) {
          // Waiting for a child saga (or parallel branches): each is cancelled next, in a
          // transaction of its own (lock order child, then parent); the end of the child (of the
          // last branch) fails this step and the saga compensates. Should this process stop in
          // between, the flag still turns that end into one.
          children = spec.parallel
            ? spec.parallel.branches.map((b) => branchIdOf(sagaId, step, b.name))
            : [childIdOf(sagaId, step)];
          return { accepted: true, status: saga.status };
        }
        const stopped =
          saga.status === 'waiting' ||
          (saga.current_job_id !== null && (await cancelQueuedJob(tx, saga.current_job_id)));
        if (!stopped) {
          // The step is running: it settles first, then the saga compensates (or, past a pivot
          // that just finished, goes on).
          return { accepted: true, status: saga.status };
        }
        await runSql(
          tx,
          settleStep({ sagaId, step, kind: 'step', status: 'cancelled', error: 'cancelled' }),
        );
        const transition = await inSagaTrace(engine.tracer, saga, 'cancel', () =>
          compensateNext(engine, tx, entry, flagged, index),
        );
        report(saga, step, transition, 'cancel');
        return {
          accepted: true,
          status: transition === 'cancelled' ? 'cancelled' : 'compensating',
        };
      };
      // A saga leaves the queue once, so a start over happens once or twice; bounded all the same.
      let result: CancelResult | typeof AGAIN = AGAIN;
      for (let tries = 0; result === AGAIN; tries++) {
        if (tries === MAX_CANCEL_TRIES) {
          throw new SagaError(
            'cancel_contended',
            `saga "${sagaId}": cancel found it moving in and out of its key's queue ${tries} times; try again`,
          );
        }
        result = await actionTransaction(sagaId, waitMs, once);
      }
      logger.info({ reason: 'saga_cancel', sagaId, accepted: result.accepted }, 'cancel requested');
      // Every child is tried, whichever fails: a branch's cancel that threw (its database call,
      // a step its definition lacks) left the branches after it running (noticed in review).
      const { refused } = await eachChild(children, async (childId) => {
        const down = await runtime.cancel(childId, cancelOptions);
        // The child ended before the cancel reached it (its end may have run where no runtime
        // knew this parent): move the parent on from it now (for a branch: once all ended).
        if (down.reason === 'finished') {
          // Named after this saga: moving it on waits for its row first.
          await actionTransaction(sagaId, waitMs, (tx) => resumeEndedChild(engine, tx, childId));
        }
      });
      if (refused.length > 0) {
        throw new ChildSagasError('children_not_cancelled', sagaId, result, refused);
      }
      return result;
    },

    async retryFailed(sagaId, retryOptions = {}) {
      checkSagaId(sagaId);
      const waitMs = lockWaitOf(retryOptions);
      let retryChildren: string[] = [];
      const result = await actionTransaction(sagaId, waitMs, async (tx): Promise<RetryResult> => {
        const saga = await lock(tx, sagaId);
        if (saga.status !== 'failed') return { retried: false, reason: 'not_failed' };
        const entry = entryOf(saga.name, saga.version);
        const { rows } = await engine.sql<HistoryRow>(tx, selectHistory(sagaId));
        const failed = [...rows].reverse().find((r) => r.status === 'failed');
        // A failed saga let go of its key; it takes the key back only while no other holds it.
        // Checked before a child's or a branch's retry too: their end takes the key back (and
        // checks again: a saga may take the key in between).
        const lockBusy = () => keyHeldByOther(tx, saga);
        const group = entry.steps.find((s) => s.name === failed?.step)?.parallel;
        if (failed?.kind === 'compensation' && group) {
          // Branches that could not be undone: they are what an operator retries, all of them;
          // the last one's end then lets this saga go on compensating (see joinBranches).
          const { step, kind } = failed;
          const { rows: branches } = await runSql<BranchRow>(tx, selectBranches(sagaId, step));
          const stuck = branches.filter((b) => b.status === 'failed').map((b) => b.id);
          if (await lockBusy()) return { retried: false, step, kind, reason: 'lock_busy' };
          if (stuck.length === 0) {
            // A retry of a branch (this call's before, or one of the branch itself) still runs.
            if (branches.some((b) => ACTIVE.has(b.status))) {
              return { retried: false, step, kind, reason: 'in_progress' };
            }
            // All undone already (the last one's end found the key taken): go on from here.
            const spec = entry.steps.find((s) => s.name === step)!;
            const moved = await joinBranches(engine, tx, entry, saga, spec);
            if (moved === 'stale') return { retried: false, step, kind, reason: 'no_failed_step' };
            return { retried: true, step, kind };
          }
          retryChildren = stuck;
          return { retried: false, step, kind };
        }
        // A step before the pivot that failed made the saga compensate, not fail: a failed saga
        // with only such a step failed for another reason, which a retry would not mend.
        if (!failed || (failed.kind === 'step' && !saga.pivoted)) {
          return { retried: false, reason: 'no_failed_step' };
        }
        const { step, kind } = failed;
        if (await lockBusy()) return { retried: false, step, kind, reason: 'lock_busy' };
        const childStep =
          kind === 'compensation' && entry.steps.find((s) => s.name === step)?.child;
        const childId = childIdOf(sagaId, step);
        // Read without a lock: a retry of the child running now holds the child's row and then
        // wants this saga's, which this transaction holds.
        const child = childStep
          ? (await runSql<{ status: SagaStatus }>(tx, selectSaga(childId))).rows[0]
          : undefined;
        // A child still `completed` was never reopened: this saga's own compensation job for the
        // step died before it reopened the child (in its transaction), so that job runs again
        // (below, as any compensation's job) and reopens the child.
        if (childStep && !(child?.status === 'completed' && failed.job_id !== null)) {
          // Its child could not be undone: the child is what an operator retries; its end then
          // lets this saga go on compensating (see resumeParent). A child undone already (its end
          // found the key taken) lets it go on now.
          if (child && ACTIVE.has(child.status)) {
            return { retried: false, step, kind, reason: 'in_progress' };
          }
          if (child?.status === 'compensated' || child?.status === 'cancelled') {
            const moved = await resumeEndedChild(engine, tx, childId);
            if (moved !== null && moved !== 'stale') return { retried: true, step, kind };
            return { retried: false, step, kind, reason: 'no_failed_step' };
          }
          retryChildren = [childId];
          return { retried: false, step, kind };
        }
        // A child's compensation has no job of its own (the parent waits on the child, pointing
        // at no job); every other failed step or compensation names the job a retry reruns.
        if (failed.job_id === null) return { retried: false, reason: 'no_failed_step' };
        const spec = entry.steps.find((s) => s.name === step);
        if (kind === 'step' && spec?.wait) {
          // A wait after the pivot that timed out: back to waiting (with no timeout now), and
          // on at once if its signal arrived while the saga was failed.
          const { rows: arrived } = await runSql<{ payload: unknown }>(
            tx,
            selectSignal(sagaId, spec.wait.signal),
          );
          const parsed = arrived[0] && (await validate(spec.wait.payload, arrived[0].payload));
          if (parsed?.issues) return { retried: false, step, kind, reason: 'invalid_signal' };
          await engine.sql(
            tx,
            reopenSaga({ id: sagaId, status: 'waiting', step, kind, jobId: failed.job_id }),
          );
          if (parsed) {
            await runSql(tx, consumeSignal(sagaId, spec.wait.signal));
            const output = JSON.parse(JSON.stringify(parsed.value ?? null)) as unknown;
            await advanceAfter(engine, tx, entry, await lock(tx, sagaId), spec.index, output);
          }
          return { retried: true, step, kind };
        }
        if (!(await client.retryJob(failed.job_id, { tx }))) {
          return { retried: false, step, kind, reason: 'job_gone' };
        }
        const status = kind === 'step' ? 'running' : 'compensating';
        await engine.sql(tx, reopenSaga({ id: sagaId, status, step, kind, jobId: failed.job_id }));
        return { retried: true, step, kind };
      });
      if (retryChildren.length > 0) {
        // Each in a transaction of its own (lock order child, then parent, as their ends). The
        // saga goes on only once every one is undone: retried means all of them run again.
        // Every child is tried, as for a cancel: one whose retry threw left the ones after it
        // failed (found in review).
        const { done: children, refused: threw } = await eachChild(retryChildren, (childId) =>
          runtime.retryFailed(childId, retryOptions),
        );
        const refused = children.find((c) => !c.retried);
        Object.assign(
          result,
          { retried: refused === undefined && threw.length === 0 },
          refused?.reason ? { reason: refused.reason } : {},
        );
        if (threw.length > 0) {
          logger.info(
            { reason: 'saga_retry', sagaId, retried: false, childrenNotRetried: threw.length },
            'failed saga retried in part',
          );
          throw new ChildSagasError('children_not_retried', sagaId, result, threw);
        }
      }
      const { reason: refusal, ...done } = result;
      logger.info(
        { reason: 'saga_retry', sagaId, ...done, refusal: refusal ?? null },
        result.retried ? 'failed saga retried' : 'failed saga not retried',
      );
      return result;
    },

    getSaga: (id) => readSaga(pool, checkSagaId(id)),
    listSagas: (listOptions) => readSagas(pool, listOptions),

    async close() {
      await reconciler.stop();
      if (!options.client) await client.close();
      await owned.release();
    },
  };
  return runtime;
}
