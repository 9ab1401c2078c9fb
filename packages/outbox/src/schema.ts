import { sql } from 'drizzle-orm';
import {
  bigserial,
  check,
  index,
  integer,
  jsonb,
  pgSchema,
  text,
  timestamp,
  uuid,
} from 'drizzle-orm/pg-core';

// The same `skiplock` schema the queue's tables live in (drizzle-kit merges schemas by name).
const skiplock = pgSchema('skiplock');

/**
 * Message lifecycle:
 * - `pending`   written by the publishing transaction; a relay may hold it (`lease_id`, until
 *               `lease_until`) while its sink delivers it, or it waits for `run_after` after a
 *               failed attempt; `run_after` is `infinity` while it is parked behind its key's
 *               first message (see `outbox_messages_pending_key_idx`)
 * - `delivered` the sink acknowledged it (terminal; removed after the relay's retention)
 * - `dead`      it failed for good: a permanent failure or its last attempt; `last_error` says why
 *               (terminal until an operator retries it)
 */
export const outboxStatus = skiplock.enum('outbox_status', ['pending', 'delivered', 'dead']);

export type OutboxStatus = (typeof outboxStatus.enumValues)[number];

export const outboxMessages = skiplock.table(
  'outbox_messages',
  {
    /** Publish order, and the message id a sink gives the broker. */
    id: bigserial('id', { mode: 'bigint' }).primaryKey(),
    topic: text('topic').notNull(),
    /** Messages of one key are delivered one at a time in id order; null: no order. */
    key: text('key'),
    payload: jsonb('payload').notNull(),
    headers: jsonb('headers').notNull().default({}),
    status: outboxStatus('status').notNull().default('pending'),
    /** Attempts started; a relay counts one when it claims the message. */
    attempts: integer('attempts').notNull().default(0),
    /** The earliest moment the message may be claimed (after a failed attempt, its backoff). */
    runAfter: timestamp('run_after', { withTimezone: true }).notNull().defaultNow(),
    /** The claim that holds it; the settle is fenced on it, so a relay whose lease ran out and
     * whose message another relay took cannot mark it. A message sent dead because its last
     * attempt's lease ran out keeps it, so that attempt's late settle still lands. */
    leaseId: uuid('lease_id'),
    leaseUntil: timestamp('lease_until', { withTimezone: true }),
    /** Which relay holds it, for operators. */
    lockedBy: text('locked_by'),
    lastError: text('last_error'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    /** When it was delivered or went dead. */
    settledAt: timestamp('settled_at', { withTimezone: true }),
  },
  (t) => [
    // The claim: pending messages by due time, then publish order. Only pending rows are in it,
    // so delivered history costs the claim nothing; and the followers of a key whose head waits
    // out a backoff are pushed to the head's due time, so the claim's range scan stops before
    // them instead of stepping over each (100,000 of them behind one failing head: 2.1 s a claim).
    index('outbox_messages_pending_idx')
      .on(t.runAfter, t.id)
      .where(sql`status = 'pending'`),
    // The per-key order check (is an earlier message of this key still pending?), split by
    // whether a message is parked: a claim that takes a key's first message parks the key's
    // later ones past a window (run_after infinity, out of the claim's range scan above), and
    // the settle that ends that message unparks the next. Without it a claim stepped over every
    // due message of a key whose first one was in flight: a pass took 86 ms with 40,000 queued
    // on one key. Both halves are ranges of this index: the unparked followers of a key, which
    // the claim parks, and its first parked one, which the settle unparks.
    index('outbox_messages_pending_key_idx')
      .on(t.key, sql`(run_after = 'infinity'::timestamptz)`, t.id)
      .where(sql`status = 'pending' AND key IS NOT NULL`),
    // Retention of delivered rows, oldest first.
    index('outbox_messages_settled_idx')
      .on(t.status, t.settledAt)
      .where(sql`status <> 'pending'`),
    // The dead list, newest first by id (the dashboard's outbox page, every 2 s): with the index
    // above the page read and sorted every dead message, which stay until revived, or walked the
    // primary key backward through the day's delivered rows for the few dead among them.
    index('outbox_messages_dead_idx')
      .on(t.id)
      .where(sql`status = 'dead'`),
    check('outbox_messages_attempts_check', sql`attempts >= 0`),
  ],
);
