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
      count: number;
      inflight: number;
      ratePerSecond: number;
    };

/** Parent → child. */
export type ParentMessage = { type: 'go' } | { type: 'report' } | { type: 'stop' };

export interface CpuUse {
  userMs: number;
  systemMs: number;
}

export interface ChildReport {
  handled: number;
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
