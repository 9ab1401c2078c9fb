import { runSql, type Queryable } from '@skiplock/queue/engine';
import { countMessages, retryDead, selectDead, type DeadRow } from './sql/messages.js';

export interface OutboxCounts {
  pending: number;
  delivered: number;
  dead: number;
  /** Age of the oldest pending message in ms, or null when none is pending. */
  oldestPendingMs: number | null;
}

/** Messages by status: what an operator checks first when events seem late. */
export async function outboxCounts(db: Queryable): Promise<OutboxCounts> {
  const { rows } = await runSql<{ status: string; count: number; oldest_ms: number | null }>(
    db,
    countMessages(),
  );
  const counts: OutboxCounts = { pending: 0, delivered: 0, dead: 0, oldestPendingMs: null };
  for (const row of rows) {
    if (row.status === 'pending' || row.status === 'delivered' || row.status === 'dead') {
      counts[row.status] = row.count;
    }
    if (row.status === 'pending' && row.oldest_ms !== null)
      counts.oldestPendingMs = Math.round(Number(row.oldest_ms));
  }
  return counts;
}

export interface DeadMessage {
  id: string;
  topic: string;
  key: string | null;
  attempts: number;
  lastError: string | null;
  createdAt: Date;
  deadAt: Date;
}

/** Dead messages, newest first; pass the last id of a page as `beforeId` for the next. */
export async function deadMessages(
  db: Queryable,
  options: { limit?: number; beforeId?: string } = {},
): Promise<DeadMessage[]> {
  const limit = Math.min(Math.max(1, options.limit ?? 50), 1_000);
  const { rows } = await runSql<DeadRow>(db, selectDead(limit, options.beforeId ?? null));
  return rows.map((r) => ({
    id: r.id,
    topic: r.topic,
    key: r.key,
    attempts: r.attempts,
    lastError: r.last_error,
    createdAt: r.created_at,
    deadAt: r.settled_at,
  }));
}

/** Sends dead messages back for delivery with fresh attempts; returns the ids it revived. */
export async function retryDeadMessages(db: Queryable, ids: readonly string[]): Promise<string[]> {
  for (const id of ids) {
    if (!/^[1-9][0-9]{0,18}$/.test(id))
      throw new TypeError(`retryDeadMessages: "${id}" is not a message id`);
  }
  const { rows } = await runSql<{ id: string }>(db, retryDead(ids));
  return rows.map((r) => r.id);
}
