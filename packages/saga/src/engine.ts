import type { AnyJobDefinition, Client, DeadJobInfo, JobContext, Logger } from '@skiplock/queue';
import type {
  LocalHandOff,
  Opening,
  QueryOutcome,
  Queryable,
  Statement,
} from '@skiplock/queue/engine';
import type { Tracer } from '@opentelemetry/api';
import type { SQL } from 'drizzle-orm';
import type pg from 'pg';
import type { AnySagaDefinition, StepSpec } from './define.js';
import type { StepOutputs } from './step.js';
import type { SagaMetrics } from './metrics.js';
import type { SagaRow } from './sql/sagas.js';
import type { Notices } from './notices.js';

/** Where a crash-injection hook is called; see `@skiplock/saga/testing`. */
export interface FaultPoint {
  sagaId: string;
  sagaName: string;
  step: string;
  kind: 'step' | 'compensation';
  attempt: number;
  /** `before` the user's code runs, or `after` it returned and before its completion commits. */
  phase: 'before' | 'after';
}

/** Throw from it to fail an attempt at that point. */
export type FaultHook = (point: FaultPoint) => void | Promise<void>;

/** One registered definition with the job types its steps run as. */
export interface SagaEntry {
  def: AnySagaDefinition;
  steps: readonly StepSpec[];
  runJobs: AnyJobDefinition[];
  compensateJobs: (AnyJobDefinition | null)[];
  timeoutJobs: (AnyJobDefinition | null)[];
  /** Wait steps by the signal name they wait for. */
  signals: ReadonlyMap<string, StepSpec>;
}

/** What the transitions and job handlers share. */
export interface Engine {
  pool: pg.Pool;
  client: Client;
  /**
   * Runs one of the saga's statements as a named prepared statement (unless the runtime's
   * `preparedStatements` is off): each connection parses and plans it once. Used for the
   * statements every saga runs (start, the step's lock, history and pointer writes); the rare
   * ones (conflicts, failures, the reconciler) stay unnamed. With every statement prepared, a
   * side-by-side benchmark run took PostgreSQL CPU per saga from 13.6 to 9.7 ms. `opening`:
   * the transaction's BEGIN, sent with this statement (see `withTransaction` of the queue).
   */
  sql: <T>(tx: Queryable, query: SQL, opening?: Opening) => Promise<QueryOutcome<T>>;
  /** One of the saga's statements as `sql` names it, for the queue to send (see `Completion`). */
  statement: (query: SQL) => Statement;
  logger: Logger;
  metrics: SagaMetrics;
  entries: ReadonlyMap<string, SagaEntry>;
  faults: FaultHook | null;
  /**
   * Inside a step's completing transaction, that step's job (or, in a dead step's hook, its
   * `DeadJobInfo`): the next job the saga enqueues there is handed to the same worker (see
   * `enqueueHandedOff`), which runs it without a round trip through the queue's wake-up path.
   */
  handOff?: JobContext | DeadJobInfo | LocalHandOff | undefined;
  /**
   * In a step's completing transaction, the saga as its locked completion left it, with every
   * completed step's output: what the next step's run would read first. Carried to that run
   * when its job is handed off (see `SagaSnapshot`).
   */
  onward?: SagaSnapshot | undefined;
  /** The saga's OpenTelemetry tracer (see tracing.ts); null with `tracing: false`. */
  tracer: Tracer | null;
  /** What this runtime has warned about once already (see `Notices`). */
  notices: Notices;
  /**
   * False in the reconciler's pass over live sagas: a saga that ends there starts the next one
   * queued for its lock key only when the key's turn is free at once (see `endSaga`).
   */
  waitForKeyTurn?: boolean | undefined;
}

/** The engine for the completing transaction of `job`: its successors are handed to its worker. */
export const handingOff = (
  e: Engine,
  job: JobContext | DeadJobInfo,
  onward?: SagaSnapshot,
): Engine => ({ ...e, handOff: job, onward });

/**
 * How old a carried snapshot may be when its run starts. A handed-off job starts in the slot its
 * predecessor frees or a free one, so it is normally milliseconds old; one that waited longer
 * (a stop, a full buffer) reads the saga instead.
 */
export const MAX_SNAPSHOT_AGE_MS = 1_000;

/**
 * The saga as a handed-off step's run finds it, carried from the transaction that enqueued that
 * step (`carry` of the queue's `enqueueHandedOff`) in place of the read each run starts with: one
 * statement and one pooled connection's round trip less per handed-off step. It holds what that
 * transaction saw under the saga's row lock and wrote; its outputs are as jsonb returned them (key
 * order included), as a read would return them. What may change after that commit is checked
 * again under the lock by the step's completion, as for a read: a cancel or an operator's move
 * meanwhile ends the run as stale or compensates, as one that came while the step ran.
 */
export class SagaSnapshot {
  constructor(
    readonly saga: SagaRow,
    readonly outputs: StepOutputs,
    /** `performance.now()` when `saga.deadline_left_ms` was read. */
    readonly at: number,
  ) {}

  /** This snapshot pointed at its next step, `step`, whose job is `jobId` (set once inserted). */
  next(step: string, pivoted: boolean): SagaSnapshot {
    return new SagaSnapshot(
      {
        ...this.saga,
        status: 'running',
        current_step: step,
        current_kind: 'step',
        current_job_id: null,
        pivoted,
        cancel_requested: false,
      },
      this.outputs,
      this.at,
    );
  }

  /**
   * The row and outputs as a read of saga `sagaId` now would return them, or null if not its or
   * older than `MAX_SNAPSHOT_AGE_MS` (then the run reads the saga: a cancel that came meanwhile
   * stops the step before it runs, as it does after a read). `deadline_left_ms` counts from the
   * completing transaction's start, as a read's counts from its own (timeout jobs are scheduled
   * from that clock); the step's deadline timer and its completion's checks bound the difference.
   */
  rowOf(sagaId: string): (SagaRow & { outputs: StepOutputs }) | null {
    const age = performance.now() - this.at;
    if (this.saga.id !== sagaId || age > MAX_SNAPSHOT_AGE_MS) return null;
    const left = this.saga.deadline_left_ms;
    return {
      ...this.saga,
      outputs: this.outputs,
      deadline_left_ms: left === null ? null : left - age,
    };
  }
}

export const entryKey = (name: string, version: number) => `${name}@${version}`;
