import { sql, type SQL } from 'drizzle-orm';
import { commitItem } from './commit.js';
import { ownsToken, ownsTokens, type LockToken } from './fence.js';

export type { LockToken };

/** Longest `last_error` and history message kept; a stack trace is not a message. */
export const MAX_ERROR_LENGTH = 2_000;
/** Newest entries kept in a job's error history. */
export const MAX_ERROR_HISTORY = 25;

/** What a completion writes: the row stays as history, leased no more. */
const completedSet = sql.raw(
  "status = 'completed', completed_at = now(), lease_expires_at = NULL, updated_at = now()",
);

/**
 * Completes many jobs in one statement; returns the ids that were still ours. `durable: false`
 * (the batched completer, unless the worker's `asyncCommit` is off) skips the commit's WAL flush
 * wait; see `commitItem`.
 */
export function completeJobs(
  workerId: string,
  tokens: readonly LockToken[],
  { durable = true }: { durable?: boolean } = {},
) {
  return sql`
    UPDATE skiplock.jobs j
    SET ${completedSet}
    ${durable ? sql`` : sql`FROM ${commitItem(true)}`}
    WHERE ${ownsTokens(workerId, tokens)}
    RETURNING j.id::text AS id`;
}

/**
 * The worker's batched completion: `completeJobs` for a batch, answered with one row, how many it
 * completed and, only when that is not all of them, their ids. The usual answer, every job, is one
 * row instead of one per job (parsing 500 rows per batch was about 9 % of the bytes a drain
 * allocates). `again`: see `completeBatchAgain`.
 */
export function completeBatch(
  workerId: string,
  tokens: readonly LockToken[],
  durable: boolean,
  again = false,
) {
  if (again) return completeBatchAgain(workerId, tokens, durable);
  return sql`
    WITH done AS (${completeJobs(workerId, tokens, { durable })})
    SELECT count(*)::int AS completed,
           CASE WHEN count(*) < ${tokens.length}::int THEN array_agg(id) END AS ids
    FROM done`;
}

/**
 * The batch written again after a failed write, which may have committed before its answer was
 * lost, or may still be running on the server (a connection the client gave up on while the
 * write waited for a row lock). Its jobs that are `completed` at their token's attempt under this
 * worker's name were completed by that write, and count as completed: another worker's
 * completion, after the sweeper, carries its own name and a later attempt, and no other write of
 * this worker completes an attempt the completer holds. Before, the second write found them not
 * processing and reported each lost to another worker (`lock_lost`, in logs, events and metrics)
 * though the worker had finished them. The rows are read `FOR UPDATE`, which waits for a write
 * still running and then reads what it left; read in the statement's snapshot they still looked
 * `processing` and were counted neither way (found in review). The update is driven from those
 * rows, so a job counts once. Left open: an operator's retry resets `attempts`, so a job swept,
 * retried by hand and completed by this same worker at the same attempt number inside the
 * batch's retry window (seconds) would count for the old attempt too.
 */
function completeBatchAgain(workerId: string, tokens: readonly LockToken[], durable: boolean) {
  return sql`
    WITH latest AS MATERIALIZED (
      SELECT j.id, j.status FROM skiplock.jobs j
      WHERE ${ownsTokens(workerId, tokens, 'or completed')}
      ORDER BY j.id
      FOR UPDATE
    ),
    done AS (
      UPDATE skiplock.jobs j
      SET ${completedSet}
      FROM latest l ${durable ? sql`` : sql`, ${commitItem(true)}`}
      WHERE j.id = l.id AND l.status = 'processing'
      RETURNING j.id::text AS id
    )
    SELECT count(*)::int AS completed,
           CASE WHEN count(*) < ${tokens.length}::int THEN array_agg(id) END AS ids
    FROM (SELECT id FROM done
          UNION ALL SELECT id::text FROM latest WHERE status = 'completed') d`;
}

/** The row `completeBatch` answers with: `ids` only when some of the batch were not completed. */
export interface CompletedBatch {
  completed: number;
  ids: string[] | null;
}

export interface FailParams {
  workerId: string;
  token: LockToken;
  /** `retryable` schedules a retry after `delayMs`; `dead` ends the job. */
  status: 'retryable' | 'dead';
  delayMs: number;
  reason: string;
  message: string;
}

/** Records a failed attempt: retry later (in the database clock) or dead, fenced by the token. */
export function failJob(p: FailParams) {
  return sql`
    UPDATE skiplock.jobs j
    SET ${failedAttempt({
      status: sql`${p.status}::skiplock.job_status`,
      delayMs: sql`${p.delayMs}::float8`,
      reason: sql`${p.reason}::text`,
      message: sql`${p.message.slice(0, MAX_ERROR_LENGTH)}::text`,
    })}
    WHERE ${ownsToken(p.workerId, p.token)}
    RETURNING j.id::text AS id`;
}

/**
 * How many times in a row the job was handed back for want of a definition of its type
 * (`handBackUnknownType`): the count its newest history entry carries, 0 when that entry is
 * anything else. So an operator's `retryJob` of one that went dead so, whose newest entry is
 * its death, starts again at 0 (counting every such entry in the history, it was killed again
 * on its first claim by a worker of the old version).
 */
export function unknownTypeHandBacks(token: LockToken) {
  return sql`
    SELECT coalesce((j.errors -> -1 ->> 'handedBack')::int, 0) AS n
    FROM skiplock.jobs j WHERE j.id = ${token.id}`;
}

/**
 * Hands back a job whose type the claiming worker does not define, for one that does: written as
 * a failed attempt (reason `unknown_type`, due again after `delayMs`, a keyed job `waiting` for
 * its slot) whose attempt is given back, so workers that cannot run it do not spend the attempts
 * it has for its own failures. Its history entry carries `handedBack`, the count so far
 * (`unknownTypeHandBacks`). Fenced by the token.
 */
export function handBackUnknownType(p: {
  workerId: string;
  token: LockToken;
  delayMs: number;
  message: string;
  handedBack: number;
}) {
  return sql`
    UPDATE skiplock.jobs j
    SET ${failedAttempt({
      status: sql`'retryable'::skiplock.job_status`,
      delayMs: sql`${p.delayMs}::float8`,
      reason: sql`'unknown_type'::text`,
      message: sql`${p.message.slice(0, MAX_ERROR_LENGTH)}::text`,
      entry: sql`jsonb_build_object('handedBack', ${p.handedBack}::int)`,
    })},
        attempts = j.attempts - 1
    WHERE ${ownsToken(p.workerId, p.token)}
    RETURNING j.id::text AS id`;
}

/**
 * What every failed attempt writes, whoever noticed the failure (the worker that ran it, or the
 * sweeper after its lease expired), from one row's expressions: the status (`retryable` for a retry,
 * or `dead`), the retry delay, the reason and the message, already cut to `MAX_ERROR_LENGTH`. The
 * retry time is `now()` plus the delay, in the database clock; the history keeps the newest
 * `MAX_ERROR_HISTORY` entries.
 */
export function failedAttempt(f: {
  status: SQL;
  delayMs: SQL;
  reason: SQL;
  message: SQL;
  /** More fields for the history entry (a jsonb object). */
  entry?: SQL;
}) {
  // A job with a concurrency key gives its slot back while it waits for the retry: it goes
  // `waiting`, and an admission pass makes it pending again once it is due and a slot is free.
  return sql`
        status = CASE WHEN ${f.status} = 'retryable' AND j.concurrency_key IS NOT NULL
                      THEN 'waiting'::skiplock.job_status ELSE ${f.status} END,
        run_at = CASE WHEN ${f.status} = 'retryable'
                      THEN now() + ${f.delayMs} * interval '1 millisecond' ELSE j.run_at END,
        last_error = ${f.message},
        errors = (CASE WHEN jsonb_array_length(j.errors) >= ${MAX_ERROR_HISTORY}
                       THEN j.errors - 0 ELSE j.errors END)
                 || jsonb_build_array(jsonb_build_object(
                      'attempt', j.attempts, 'reason', ${f.reason},
                      'message', ${f.message}, 'at', now())${f.entry ? sql` || ${f.entry}` : sql``}),
        lease_expires_at = NULL,
        updated_at = now()`;
}

/**
 * Hands jobs this worker holds back without spending an attempt: unfinished ones on shutdown
 * (buffered or aborted past the deadline), and ones handed off to it that it never started (see
 * `releaseUnadopted`). Pending again at once, with a notification per queue, so that a listening
 * worker claims them now rather than at its next poll (identical notifications of one transaction
 * reach a listener once). A job with a concurrency key gives its slot back and waits for
 * admission again (a rate-limited one must not start later than its logged start), with a
 * notification per key, so that a listening worker admits it now rather than at its next pass.
 */
export function releaseJobs(workerId: string, tokens: readonly LockToken[], asyncCommit: boolean) {
  return sql`
    WITH released AS (
      ${releasing(workerId, tokens, asyncCommit)} RETURNING j.id, j.queue, j.status, j.concurrency_key
    )
    SELECT id::text AS id,
           (CASE WHEN status = 'pending' THEN pg_notify('skiplock_jobs', queue)
                 WHEN status = 'waiting' THEN pg_notify('skiplock_admit', concurrency_key)
            END) IS NOT NULL AS notified
    FROM released`;
}

const releasing = (workerId: string, tokens: readonly LockToken[], asyncCommit: boolean) => sql`
    UPDATE skiplock.jobs j
    SET status = CASE WHEN j.concurrency_key IS NULL THEN 'pending'
                      ELSE 'waiting' END::skiplock.job_status,
        attempts = j.attempts - 1, lease_expires_at = NULL,
        locked_by = NULL, locked_at = NULL, run_at = now(), updated_at = now()
    FROM ${commitItem(asyncCommit)}
    WHERE ${ownsTokens(workerId, tokens)}`;
