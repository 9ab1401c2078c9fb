import { sql } from 'drizzle-orm';
import type { ClaimedRow } from './claim.js';

export interface AdmitRow {
  admitted: number;
  /** Where a full pass that stopped at `maxKeys` goes on; null when it reached the last key. */
  last_key: string | null;
  /** Admitted jobs leased to the caller (`lease`), claimed rows as a claim returns them. */
  leased: ClaimedRow[];
}

/** Admitted jobs the caller runs itself, at most `max`, of its queues and job types only. */
export interface AdmitLease {
  workerId: string;
  max: number;
  queues: readonly string[];
  types: readonly string[];
}

/**
 * Admits waiting jobs into free slots of their concurrency keys (see skiplock.admit in
 * migrations-flow/0000_admission.sql). `keys` null: a pass over the keys that have waiting jobs,
 * after `afterKey`, at most `maxKeys`. `wait` false skips a key another admitter holds.
 */
export function admitKeys(p: {
  keys: readonly string[] | null;
  wait: boolean;
  maxKeys: number;
  afterKey: string | null;
  lease: AdmitLease | null;
}) {
  const lease = p.lease;
  return sql`
    SELECT admitted, last_key, leased FROM skiplock.admit(
      ${p.keys === null ? null : sql.param(p.keys)}::text[], ${p.wait}::boolean,
      ${p.maxKeys}::int, ${p.afterKey}::text,
      ${lease?.workerId ?? null}::text, ${lease?.max ?? 0}::int,
      ${lease ? sql.param(lease.queues) : null}::text[],
      ${lease ? sql.param(lease.types) : null}::text[])`;
}
