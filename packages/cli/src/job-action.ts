import type { Client, Job, JobStatus } from '@skiplock/queue';
import { CliError } from './args.js';
import { withDatabase } from './database.js';
import { silentClient } from './lazy.js';

export interface JobAction {
  /** Verb for messages: "retried", "cancelled". */
  verb: string;
  allowed: readonly JobStatus[];
  apply(client: Client, id: string): Promise<boolean>;
}

/**
 * Applies a state change that only some statuses allow. When it changes nothing, the job is read
 * again so the message says why: it does not exist, or which status it is in.
 */
export async function applyJobAction(
  url: string,
  id: string,
  action: JobAction,
): Promise<{ before: Job; after: Job }> {
  return withDatabase(url, async (db) => {
    const client = await silentClient(db.pool);
    const before = await client.getJob(id);
    if (!before) throw new CliError(`job ${id} does not exist`);
    const changed = await action.apply(client, id);
    const after = await client.getJob(id);
    if (!changed || !after) {
      const status = after?.status ?? 'gone';
      throw new CliError(
        `job ${id} is ${status}; only ${action.allowed.join(', ')} jobs can be ${action.verb}`,
      );
    }
    return { before, after };
  });
}
