import {
  cancelQueuedJob,
  jobStates,
  jobStatesByKey,
  LockKeys,
  tryAdvisoryLock,
  withTransaction,
} from '@skiplock/queue/engine';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { jobRow, quiet } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });
const noop = defineJob({ type: 'engine.noop', payload: z.object({}), handler: () => {} });

async function jobIn(status: string, extra = '') {
  const { id } = await client.enqueue(noop, {});
  await db.pool.query(
    `UPDATE skiplock.jobs SET status = $2::skiplock.job_status ${extra} WHERE id = $1`,
    [id, status],
  );
  return id;
}

describe('@skiplock/queue/engine', () => {
  it("withTransaction begins READ COMMITTED whatever the server's default isolation", async () => {
    // A role or database set to REPEATABLE READ: skiplock's own transactions re-read rows after
    // taking their locks (fencing, a saga's join), which a fixed snapshot would not show.
    const strict = new pg.Pool({
      connectionString: db.url,
      max: 1,
      options: '-c default_transaction_isolation=repeatable\\ read',
    });
    try {
      const plain = await strict.query<{ level: string }>(
        "SELECT current_setting('transaction_isolation') AS level",
      );
      expect(plain.rows[0]?.level).toBe('repeatable read');
      const level = await withTransaction(strict, async (tx) => {
        const { rows } = await tx.query<{ level: string }>(
          "SELECT current_setting('transaction_isolation') AS level",
        );
        return rows[0]?.level;
      });
      expect(level).toBe('read committed');
    } finally {
      await strict.end();
    }
  });

  it('cancelQueuedJob cancels pending and retry-waiting jobs, and no job that started or ended', async () => {
    const pending = await jobIn('pending');
    const waiting = await jobIn('retryable', `, attempts = 1, last_error = 'flaky'`);
    const running = await jobIn(
      'processing',
      `, attempts = 1, locked_by = 'w', lease_expires_at = now() + interval '1 minute'`,
    );
    const done = await jobIn('completed', ', attempts = 1, completed_at = now()');
    expect(await cancelQueuedJob(db.pool, pending)).toBe(true);
    expect(await cancelQueuedJob(db.pool, waiting)).toBe(true);
    expect(await cancelQueuedJob(db.pool, running)).toBe(false);
    expect(await cancelQueuedJob(db.pool, done)).toBe(false);
    expect(await cancelQueuedJob(db.pool, '987654321')).toBe(false);
    expect((await jobRow(db.pool, pending)).status).toBe('cancelled');
    expect((await jobRow(db.pool, waiting)).status).toBe('cancelled');
    expect((await jobRow(db.pool, running)).status).toBe('processing');
    expect((await jobRow(db.pool, done)).status).toBe('completed');
  });

  it('cancelQueuedJob leaves a job whose row another transaction holds, without waiting for it', async () => {
    const id = await jobIn('pending');
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM skiplock.jobs WHERE id = $1 FOR UPDATE', [id]);
      // Inside a transaction of its own, as the saga's cancel calls it.
      const cancelled = await withTransaction(db.pool, (tx) => cancelQueuedJob(tx, id));
      expect(cancelled).toBe(false);
      await holder.query('COMMIT');
    } finally {
      holder.release();
    }
    expect((await jobRow(db.pool, id)).status).toBe('pending');
    expect(await cancelQueuedJob(db.pool, id)).toBe(true);
  });

  it('jobStates reads the status and last error of each listed job, leaving out jobs that do not exist', async () => {
    const pending = await jobIn('pending');
    const dead = await jobIn('dead', `, attempts = 1, last_error = 'unknown_type: gone'`);
    const deleted = await jobIn('completed', ', attempts = 1, completed_at = now()');
    await db.pool.query('DELETE FROM skiplock.jobs WHERE id = $1', [deleted]);
    const states = await jobStates(db.pool, [pending, dead, deleted]);
    expect(Object.fromEntries(states)).toEqual({
      [pending]: {
        status: 'pending',
        lastError: null,
        attempts: 0,
        lockedAt: null,
        due: true,
        stopping: false,
      },
      [dead]: {
        status: 'dead',
        lastError: 'unknown_type: gone',
        attempts: 1,
        lockedAt: null,
        due: true,
        stopping: false,
      },
    });
    // A claimed job reports its attempt and when it was claimed (what getSaga shows as running).
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'processing', attempts = 1, locked_by = 'w',
              locked_at = now(), lease_expires_at = now() + interval '1 minute' WHERE id = $1`,
      [pending],
    );
    const claimed = (await jobStates(db.pool, [pending])).get(pending)!;
    expect(claimed).toMatchObject({ status: 'processing', attempts: 1, stopping: false });
    expect(claimed.lockedAt).toBeInstanceOf(Date);
    // Stopped while it ran (`cancelJob(id, { running: true })`): stopping while the stopped run
    // keeps its lease, not once the lease is gone (its handler returned, or the lease ran out).
    expect(await client.cancelJob(pending, { running: true })).toBe(true);
    expect((await jobStates(db.pool, [pending])).get(pending)).toMatchObject({
      status: 'cancelled',
      stopping: true,
    });
    await db.pool.query(
      `UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`,
      [pending],
    );
    expect((await jobStates(db.pool, [pending])).get(pending)).toMatchObject({ stopping: false });
    expect((await jobStates(db.pool, [])).size).toBe(0);
    // A job whose run time has not come is not due.
    const later = (await client.enqueue(noop, {}, { delayMs: 60_000 })).id;
    expect((await jobStates(db.pool, [later])).get(later)).toMatchObject({ due: false });
  });

  it("tryAdvisoryLock takes a key of skiplock's namespace once at a time, until the holder's transaction ends", async () => {
    const key = LockKeys.sagaReconcile;
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      expect(await tryAdvisoryLock(holder, key)).toBe(true);
      // The same key is the queue's own namespace: seen as held by anyone asking for it.
      const { rows } = await db.pool.query<{ locked: boolean }>(
        'SELECT pg_try_advisory_xact_lock($1, $2) AS locked',
        [0x5c10c, key],
      );
      expect(rows[0]!.locked).toBe(false);
      expect(await withTransaction(db.pool, (tx) => tryAdvisoryLock(tx, key))).toBe(false);
      // Other keys are free.
      expect(await withTransaction(db.pool, (tx) => tryAdvisoryLock(tx, LockKeys.sweep))).toBe(
        true,
      );
      await holder.query('COMMIT');
    } finally {
      holder.release();
    }
    expect(await withTransaction(db.pool, (tx) => tryAdvisoryLock(tx, key))).toBe(true);
  });

  it('jobStatesByKey finds the job holding each key in its queue, in one statement', async () => {
    const { id } = await client.enqueue(noop, {}, { idempotencyKey: 'by-key-1' });
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'dead', last_error = 'gone' WHERE id = $1`,
      [id],
    );
    const states = await jobStatesByKey(db.pool, [
      { queue: 'default', key: 'by-key-1' },
      { queue: 'other', key: 'by-key-1' },
      { queue: 'default', key: 'nobody' },
    ]);
    expect([...states]).toEqual([
      [
        'default\0by-key-1',
        {
          id,
          status: 'dead',
          lastError: 'gone',
          attempts: 0,
          lockedAt: null,
          due: true,
          stopping: false,
        },
      ],
    ]);
    // A job stopped while it ran reads as stopping by its key too.
    await db.pool.query(
      `UPDATE skiplock.jobs SET status = 'cancelled', locked_by = 'w',
              lease_expires_at = now() + interval '1 minute' WHERE id = $1`,
      [id],
    );
    const byKey = await jobStatesByKey(db.pool, [{ queue: 'default', key: 'by-key-1' }]);
    const stopped = byKey.get('default\0by-key-1');
    expect(stopped).toMatchObject({ status: 'cancelled', stopping: true });
  });
});
