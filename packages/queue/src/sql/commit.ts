import { sql } from 'drizzle-orm';

/**
 * A one-row FROM item that turns off `synchronous_commit` for the current transaction only
 * (`set_config(..., true)` is `SET LOCAL`), so the statement's commit does not wait for its WAL
 * flush. Used only for the worker's own bookkeeping (claims, batched completions, lease renewals,
 * releases), where losing the last few commits in a server crash costs a re-run and nothing else:
 * a lost claim leaves the job pending, a lost renewal lets the lease expire, a lost completion
 * makes the job run again (at-least-once), and the fencing by lock token still holds after
 * recovery. Enqueues, failures and `completeWith` transactions (which carry the caller's own
 * writes) keep the server's setting. On a server whose WAL flush takes milliseconds this is
 * the difference between one flush per batch and none on the hot path.
 */
const asyncCommitItem = sql`(SELECT set_config('synchronous_commit', 'off', true)) AS async_commit(v)`;
/** The same one-row FROM item with no effect, so each statement keeps one shape either way. */
const serverCommitItem = sql`(SELECT NULL::text) AS async_commit(v)`;

/**
 * The FROM item for the worker's bookkeeping statements: `asyncCommit` on (the worker's default)
 * skips the WAL flush wait as above; off keeps the server's own `synchronous_commit`.
 */
export const commitItem = (asyncCommit: boolean) =>
  asyncCommit ? asyncCommitItem : serverCommitItem;
