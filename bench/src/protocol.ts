import type { SagaShapeId } from './sagas/types.js';
import type { QueryCounts } from './query-counter.js';

export type ChildTask =
  | {
      role: 'worker';
      system: string;
      url: string;
      concurrency: number;
      retention?: boolean;
      /** Record enqueue-to-start latency of each job. */
      latency?: boolean;
    }
  | {
      role: 'enqueue';
      system: string;
      url: string;
      mode: 'bulk' | 'single';
      count: number;
      chunk: number;
    }
  | {
      role: 'saga';
      system: string;
      url: string;
      /** throughput: as many at once as `inflight` allows; paced: `ratePerSecond`, one by one. */
      mode: 'throughput' | 'paced';
      /** The workflow (see sagas/types.ts). */
      shape: SagaShapeId;
      count: number;
      inflight: number;
      ratePerSecond: number;
    }
  | ({ role: 'relay' } & RelayTaskFields)
  | ({ role: 'direct' } & RelayTaskFields);

/**
 * The relay scenario's processes. relay: the outbox relay with the outbox's own sink, started on
 * `go`; direct: the broker's client alone publishing `count` messages, no database (the ceiling).
 */
export interface RelayTaskFields {
  system: string;
  broker: 'nats' | 'rabbitmq';
  /** Names the run's stream, or exchange and queue. */
  tag: string;
  /** The run's database; the relay's only. */
  url?: string;
  batchSize: number;
  concurrency: number;
  /** Messages the direct publisher sends, over `keys` keys (the relay finds its own). */
  count: number;
  keys: number;
}

/** Parent → child. */
export type ParentMessage = { type: 'go' } | { type: 'report' } | { type: 'stop' };

export interface CpuUse {
  userMs: number;
  systemMs: number;
}

export interface ChildReport {
  /** Units of work done, warm-up included: what the accounting divides by. */
  handled: number;
  /** Of `handled`, those measured for rate and latency (a saga run's warm-up is not); default all. */
  measured?: number;
  /** The measured part's duration. */
  elapsedMs: number;
  cpu: CpuUse;
  counts: QueryCounts;
  claimLatencies: number[];
  latencies: number[];
}

/** Child → parent. */
export type ChildMessage =
  | { type: 'ready' }
  | { type: 'progress'; handled: number }
  | { type: 'report'; report: ChildReport }
  | { type: 'failed'; error: string };
