import { sql } from 'drizzle-orm';

export interface AdmitRow {
  admitted: number;
  /** Where a full pass that stopped at `maxKeys` goes on; null when it reached the last key. */
  last_key: string | null;
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
}) {
  return sql`
    SELECT admitted, last_key FROM skiplock.admit(
      ${p.keys === null ? null : sql.param(p.keys)}::text[], ${p.wait}::boolean,
      ${p.maxKeys}::int, ${p.afterKey}::text)`;
}
