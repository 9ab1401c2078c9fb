import { sql } from 'drizzle-orm';

/** The claim's lock token: a write for a job commits only if the job still carries it. */
export interface LockToken {
  id: string;
  attempt: number;
}

/** The fence every write of a claimed job passes: still processing, still locked by this worker. */
export const fenced = (workerId: string) =>
  sql`j.locked_by = ${workerId} AND j.status = 'processing'`;

/** The fence for one job: its id, the attempt it was claimed for, and `fenced`. */
export const ownsToken = (workerId: string, token: LockToken) =>
  sql`j.id = ${token.id} AND j.attempts = ${token.attempt} AND ${fenced(workerId)}`;

/**
 * The fence for many jobs in one statement: `tokenRows` goes in the FROM list and `ownsTokens` in
 * the WHERE clause. The extra `j.id = ANY(...)` lets the planner drive the update from the primary
 * key instead of scanning the table to join against the unnested tokens.
 */
export const tokenRows = (tokens: readonly LockToken[]) =>
  sql`unnest(${sql.param(tokens.map((t) => t.id))}::bigint[],
             ${sql.param(tokens.map((t) => t.attempt))}::int[]) AS d(id, attempt)`;

export const ownsTokens = (workerId: string, tokens: readonly LockToken[]) =>
  sql`j.id = ANY(${sql.param(tokens.map((t) => t.id))}::bigint[])
      AND j.id = d.id AND j.attempts = d.attempt AND ${fenced(workerId)}`;
