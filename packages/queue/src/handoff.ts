import type { Queryable } from './db.js';
import type { AnyJobDefinition } from './define.js';
import type { ClaimedRow } from './sql/claim.js';

/**
 * What a running job's context knows about handing its successor to its own worker: the worker
 * inserts the next job already leased to itself inside the job's completing transaction
 * (`ctx.completeWith`) and starts it as soon as that commits, with no NOTIFY, poll or claim in
 * between. Used by `@skiplock/saga` for the next step of a saga, through
 * `enqueueHandedOff` in `@skiplock/queue/engine`. A dead job's `onDead` hook, run by the worker
 * that ran the job, hands off the same way in its transaction (a saga's first compensation).
 *
 * Fairness: a chain of hand-offs keeps one slot of its worker for at most `limit` jobs in a row
 * (the worker's `maxHandOffs`, default 16); the next job after that is enqueued like any other,
 * for whichever worker claims it first. A handed-off job starts ahead of jobs buffered by claims,
 * in the slot its predecessor frees, so buffered jobs wait at most that chain.
 */
export interface HandOffSlot {
  workerId: string;
  /** How many hand-offs led to the running job (0 for a claimed one). */
  depth: number;
  limit: number;
  /** Whether this worker runs jobs of this type and queue, and still takes work. */
  accepts(jobType: string, queue: string): boolean;
  /**
   * How many jobs this worker could start as the running job ends: the slot it frees and the
   * free ones not yet promised (to buffered jobs, or to other open transactions' hand-offs beyond
   * their first). A transaction hands off at most that many (its first always); the rest are
   * enqueued for any worker, so a fan-out does not wait in one busy worker's buffer while others
   * are idle. Claims in flight are not counted: what they bring waits in the buffer as usual.
   */
  room(): number;
  /**
   * Whether even the first hand-off needs `room()`: a dead job's hook (its job's slot was freed
   * before the hook, and a buffered job may have taken it) and a slot lent to a transaction that
   * is not a job's (see `LOCAL_HAND_OFF`) free no slot as they commit.
   */
  firstNeedsRoom?: boolean;
  /** Open while the job's completing transaction runs: hand-offs can join only that one. */
  open: boolean;
  /** Rows inserted leased in the open transaction, started once it commits. */
  pending: HandedOff[];
  /** Leased inserts in flight (see `promisedBy`): counted as pending. */
  inserting: number;
}

/**
 * A successor inserted leased to the worker, with what its predecessor's transaction left it
 * (`carry` of `enqueueHandedOff`): the run it starts sees that value through `handedOffCarry`.
 */
export interface HandedOff {
  row: ClaimedRow;
  carry: unknown;
  /**
   * When the insert was sent (`performance.now()`): the row's lease runs from its insert, and the
   * transaction may work on for a while before it commits and the job starts.
   */
  leasedAt: number;
}

/** The hand-offs `slot` holds or is inserting: slots of the worker promised to it. */
export const promisedBy = (slot: HandOffSlot): number => slot.pending.length + slot.inserting;

/** Where a job's context keeps its slot; a symbol keeps it out of the public `JobContext`. */
export const HAND_OFF = Symbol('skiplock.handOff');

export function handOffSlotOf(ctx: object): HandOffSlot | undefined {
  return (ctx as { [HAND_OFF]?: HandOffSlot })[HAND_OFF];
}

/** Where a handed-off job's context keeps its predecessor's `carry`; absent for any other run. */
export const CARRIED = Symbol('skiplock.carried');

/**
 * A worker's hand-off slot lent to a transaction of its own process that is not one of its jobs'
 * (a saga's start): jobs enqueued there through `enqueueHandedOff` go to this worker when it has
 * a free slot, and start once the transaction commits. Reached through `openLocalHandOff` in
 * `@skiplock/queue/engine`; null while the worker is not running or hands off nothing.
 */
export const LOCAL_HAND_OFF = Symbol('skiplock.localHandOff');

/** What a worker lends under `LOCAL_HAND_OFF`. */
export interface LocalSlot {
  slot: HandOffSlot;
  /** The transaction committed: start what it inserted leased to the worker. */
  committed(): void;
  /** The transaction ended either way; the slot is no longer open. Idempotent. */
  close(): void;
}

/**
 * The client's insert of one job already claimed by `workerId`, validated and serialized like any
 * enqueue; `claimed` is missing when the idempotency key was taken (`id` is then that job's).
 * Reached through a symbol, so it is not part of the public `Client`.
 */
export type LeasedInsert = (
  definition: AnyJobDefinition,
  payload: unknown,
  options: { idempotencyKey?: string | undefined; priority?: number | undefined; tx?: unknown },
  tx: Queryable,
  workerId: string,
  /** Statements run with the insert, in its round trip (see `insertLeasedJobThen`). */
  then?: readonly { text: string; values: unknown[] }[],
) => Promise<{ id: string; inserted: boolean; claimed?: ClaimedRow }>;

export const ENQUEUE_LEASED = Symbol('skiplock.enqueueLeased');
