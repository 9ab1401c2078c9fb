/** What every benchmark job carries: its index and the wall-clock time it was enqueued. */
export interface Payload {
  i: number;
  t: number;
}

export interface WorkerOptions {
  url: string;
  concurrency: number;
  onJob: (payload: Payload) => void;
  /** Churn runs: finished jobs are pruned the way the system does it. */
  retention?: boolean;
}

export interface RunningWorker {
  /** Starts taking jobs. */
  go(): Promise<void>;
  stop(): Promise<void>;
}

export interface Producer {
  enqueue(payload: Payload): Promise<void>;
  /** Enqueues a chunk with the system's bulk call. */
  enqueueMany(payloads: readonly Payload[]): Promise<void>;
  close(): Promise<void>;
}

/** One queue implementation in one configuration, driven the same way as the others. */
export interface QueueSystem {
  id: string;
  label: string;
  /** Creates the system's tables in an empty database. */
  install(url: string): Promise<void>;
  enqueueBulk(url: string, payloads: readonly Payload[], chunk: number): Promise<void>;
  /** A connected producer that enqueues one job per call, in its own transaction. */
  producer(url: string): Promise<Producer>;
  /** Builds a worker, connected and ready, that takes no job until `go`. */
  worker(options: WorkerOptions): Promise<RunningWorker>;
  /** Counts the jobs not yet finished (settled in the database). */
  remainingSql: string;
  /** The schema whose tables the churn scenario measures. */
  schema: string;
  /** Recognizes the statement that claims jobs, for claim latency. */
  isClaim(text: string): boolean;
  /** The most jobs of one concurrency key (group) running at one instant, for the keys drain. */
  mostActivePerKeySql?: string;
  /**
   * Claims `batch` jobs `rounds` times, one claim after the other, completing each batch before
   * the next, from a process doing nothing else: each claim's round trip without a busy worker's
   * event loop in it (see `ClaimProbe`).
   */
  claimProbe?(url: string, batch: number, rounds: number): Promise<ClaimProbe>;
}

/**
 * What `claimProbe` measured. A drain's own claim timings cannot give the claim's cost: timed to
 * its result (see `query-counter.ts`), a claim waits for the worker's event loop, which runs the
 * jobs claimed before.
 */
export interface ClaimProbe {
  /** From sending each claim to having its rows, in ms. */
  latenciesMs: number[];
  /** Jobs the probe claimed (and completed) in all. */
  claimed: number;
}

/**
 * A clock every process on the machine shares: the system's monotonic clock (CLOCK_MONOTONIC on
 * Linux), in ms, for latencies measured across processes. Not `performance.timeOrigin + now()`:
 * its origin is read from the wall clock when each process starts, so a wall clock stepped or
 * slewed between two processes' starts shifts every figure (a full run on a freshly booted VM
 * measured 3.5 s from enqueue to start for every system).
 */
export const sharedClockMs = (): number => Number(process.hrtime.bigint() / 1_000n) / 1_000;

export function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}
