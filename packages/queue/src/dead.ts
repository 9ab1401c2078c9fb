import type { SQL } from 'drizzle-orm';
import type pg from 'pg';
import { runSql } from './db.js';
import type { AnyJobDefinition, DeadJobInfo } from './define.js';
import type { FailureDecision } from './retry/policy.js';

/** What a failed attempt writes, whoever noticed the failure: see `failedAttempt`. */
export interface FailureRecord {
  status: 'retryable' | 'dead';
  delayMs: number;
  /** The reason in the job's error history. */
  reason: string;
  message: string;
}

/**
 * The record of a failed attempt, from the decision about it (`decideFailure`). A job whose
 * attempts ran out keeps its last attempt's own reason (`error`, `timeout`, `lease_expired`); a
 * job killed for what it is (`non_retryable`, `invalid_payload`, `unknown_type`) says so first.
 */
export function failureRecord(decision: FailureDecision, message: string): FailureRecord {
  if (decision.kind === 'retry') {
    return { status: 'retryable', delayMs: decision.delayMs, reason: decision.reason, message };
  }
  if (decision.reason === 'max_attempts') {
    return { status: 'dead', delayMs: 0, reason: decision.attemptReason, message };
  }
  return {
    status: 'dead',
    delayMs: 0,
    reason: decision.reason,
    message: `${decision.reason}: ${message}`,
  };
}

/**
 * The one way a job goes dead, for the worker that ran it and the sweeper alike: in `tx`, `kill`
 * marks it dead, then its job type's `onDead` hook runs in the same transaction, so whatever the
 * hook writes (a saga's compensation) commits with the dead state or not at all. `kill` touches
 * the job only while it is still the caller's to settle; when it touched nothing, the hook does
 * not run and the result is false.
 */
export async function markDead(
  tx: pg.PoolClient,
  kill: SQL,
  definition: AnyJobDefinition | undefined,
  info: DeadJobInfo,
): Promise<boolean> {
  if ((await runSql(tx, kill)).rowCount !== 1) return false;
  if (definition?.onDead) await definition.onDead(tx, info);
  return true;
}
