import type { RetryPolicy } from '@skiplock/saga';
import { z } from 'zod';

/**
 * The demo's retry policy and lease, for the workers and for the process that starts the sagas
 * alike: a job carries the lease of the definition that inserted it, so a starter with the
 * default left every first step leasing for 30 s. Short leases so that a SIGKILLed worker's jobs
 * come back within seconds, not the default 30 s.
 */
export const DEMO_RETRY: Pick<RetryPolicy, 'backoff' | 'leaseMs'> = {
  backoff: { baseMs: 50, maxMs: 1_000 },
  leaseMs: 3_000,
};

/** What the demo tells each worker process (as JSON in `BILLING_WORKER_CONFIG`). */
export const workerConfigSchema = z.object({
  concurrency: z.number().int().min(1).max(100),
  declineRate: z.number().min(0).max(1),
  transientRate: z.number().min(0).max(0.9),
  lateConfirmRate: z.number().min(0).max(1),
  /** Upper bound of the simulated provider round trip. */
  providerLatencyMs: z.number().int().min(0).max(10_000),
  /** How long after a `pending` charge the provider's webhook arrives (at most). */
  webhookDelayMs: z.number().int().min(0).max(600_000),
  /** How long the saga waits for that webhook before it voids the charge and compensates. */
  confirmTimeoutMs: z.number().int().min(100).max(3_600_000),
  logLevel: z.enum(['debug', 'info', 'warn', 'error', 'silent']),
});

export type WorkerConfig = z.infer<typeof workerConfigSchema>;
