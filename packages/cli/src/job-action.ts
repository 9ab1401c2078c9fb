import type { Client, Job, JobStatus } from '@skiplock/queue';
import { CliError } from './args.js';
import { withDatabase } from './database.js';
import { silentClient } from './lazy.js';

export interface JobAction {
  /** Verb for messages: "retried", "cancelled". */
  verb: string;
  allowed: readonly JobStatus[];
  apply(client: Client, id: string, flagged: boolean): Promise<boolean>;
  /** Said after the refusal of a running job when the flag was not given. */
  runningHint?: string;
  /**
   * Refused for a job stopped with `jobs cancel --running` while its run has not ended (a retry:
   * it could run twice at once), and the refusal says so.
   */
  waitsForStoppedRun?: boolean;
}

/**
 * Applies a state change that only some statuses allow. When it changes nothing, the job is read
 * again so the message says why: it does not exist, or which status it is in.
 */
export async function applyJobAction(
  url: string,
  id: string,
  action: JobAction,
  flagged = false,
): Promise<{ before: Job; after: Job }> {
  return withDatabase(url, async (db) => {
    const client = await silentClient(db.pool);
    const before = await client.getJob(id);
    if (!before) throw new CliError(`job ${id} does not exist`);
    // A saga's step, compensation or timeout job moves only with its saga (as on the dashboard):
    // retried on its own it completes against a saga that no longer expects it, doing nothing,
    // and the saga's own retry then finds its job gone; cancelled, it strands the saga.
    const { isSagaJobType, sagaIdOfKey } = await import('@skiplock/saga');
    if (isSagaJobType(before.jobType)) {
      const sagaId = sagaIdOfKey(before.idempotencyKey);
      const saga = sagaId === null ? 'a saga' : `saga ${JSON.stringify(sagaId)}`;
      throw new CliError(
        `job ${id} is a step of ${saga} (${before.jobType}) and moves only with it; ` +
          `use the saga's retry or cancel (skiplock sagas retry|cancel <id> --module FILE, the ` +
          `saga's page of skiplock dashboard --module FILE, or its runtime's retryFailed or cancel)` +
          (sagaId === null ? '' : `; skiplock sagas show ${sagaId} shows where it stands`),
      );
    }
    const changed = await action.apply(client, id, flagged);
    const after = await client.getJob(id);
    if (!changed || !after) {
      const status = after?.status ?? 'gone';
      // A run stopped with `jobs cancel --running` keeps its lease until its handler returns:
      // retried before that, the job could run twice at once. (Cancelled again, it is refused
      // for its status: before, the message said it could be cancelled once its run ended.)
      const { isStoppedRunLive } = await import('@skiplock/queue');
      if (action.waitsForStoppedRun && after && isStoppedRunLive(after, db.now)) {
        throw new CliError(
          `job ${id} is cancelled, but its stopped run has not ended: its handler has not returned ` +
            `(its lease, and its concurrency slot, are held until it does or until ` +
            `${after.leaseExpiresAt?.toISOString()}); it can be ${action.verb} once the run ends`,
        );
      }
      throw new CliError(
        `job ${id} is ${status}; only ${action.allowed.join(', ')} jobs, and processing ones whose lease has expired, can be ${action.verb}` +
          (status === 'processing' && !flagged && action.runningHint
            ? `; ${action.runningHint}`
            : ''),
      );
    }
    return { before, after };
  });
}
