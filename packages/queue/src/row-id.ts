/** The largest row id: job and message ids are PostgreSQL `bigint`s. */
const MAX_ROW_ID = 9_223_372_036_854_775_807n;

/**
 * Whether `id` can be a job's (or an outbox message's) id: 1 to 19 digits within `bigint`'s
 * range. Checked before an id reaches PostgreSQL, which fails a statement on one past the range.
 */
export function isRowId(id: string): boolean {
  return /^[0-9]{1,19}$/.test(id) && BigInt(id) <= MAX_ROW_ID;
}
