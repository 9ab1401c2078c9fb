import type pg from 'pg';

export interface EffectCounts {
  /** Idempotency keys written more than once to `<schema>.effects` (must be none). */
  repeated: { key: string; n: number }[];
  /** Distinct keys in `<schema>.effects`. */
  keys: number;
  /** Distinct keys the stand-in external API saw, and the calls it absorbed for them. */
  external: { keys: number; calls: number };
}

/**
 * What the saga crash tests' steps left in their schema: `effects` (one row per effect, written
 * in the step's transaction, no unique key, so a duplicate shows) and `external` (keyed, with a
 * call count: the stand-in external API deduplicating by idempotency key).
 */
export async function readEffects(pool: pg.Pool, schema: string): Promise<EffectCounts> {
  const effects = await pool.query<{ key: string; n: number }>(
    `SELECT key, count(*)::int AS n FROM ${schema}.effects GROUP BY key`,
  );
  const external = await pool.query<{ keys: number; calls: number }>(
    `SELECT count(*)::int AS keys, coalesce(sum(calls), 0)::int AS calls FROM ${schema}.external`,
  );
  return {
    repeated: effects.rows.filter((e) => e.n !== 1),
    keys: effects.rows.length,
    external: external.rows[0]!,
  };
}
