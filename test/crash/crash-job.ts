import { defineJob, type JobContext } from '@skiplock/queue';
import { z } from 'zod';

export const crashPayload = z.object({
  n: z.number().int(),
  /** `tx`: the handler completes through `completeWith` and writes an effect in that transaction. */
  mode: z.enum(['plain', 'tx']).default('plain'),
});

export type CrashPayload = z.output<typeof crashPayload>;

export const CRASH_JOB_TYPE = 'crash.work';

/**
 * The one job type of the crash tests. Producers (the tests) and workers (the worker processes)
 * share this definition; only the worker gives it a real handler. Attempts are plentiful because a
 * job may be cut off several times by kills, and a dead job would hide a lost one.
 */
export function crashJob(
  options: {
    leaseMs?: number;
    handler?: (payload: CrashPayload, ctx: JobContext) => Promise<void>;
  } = {},
) {
  return defineJob({
    type: CRASH_JOB_TYPE,
    payload: crashPayload,
    maxAttempts: 100,
    leaseMs: options.leaseMs ?? 2_000,
    backoff: { baseMs: 50, maxMs: 500 },
    handler:
      options.handler ??
      (() => {
        throw new Error('crash.work runs only in test/crash/worker-process.ts');
      }),
  });
}
