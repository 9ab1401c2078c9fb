import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createClient, defineJob } from '../src/index.js';
import { runSql, type Queryable, type Statement } from '../src/db.js';
import { Completer } from '../src/completer.js';
import type { StatementRunner } from '../src/prepared.js';
import { claimJobs, type ClaimedRow } from '../src/sql/claim.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { startTcpProxy } from '../../../test/support/tcp-proxy.js';
import { waitFor } from '../../../test/support/wait.js';
import { jobRow, quiet } from './fixtures.js';

const db = await useTestDatabase();
const client = createClient({ pool: db.pool, logger: quiet });

/** Sends statements unnamed, as `runSql` does, and keeps their texts. */
function countingRunner(sent: string[]): StatementRunner {
  return async (target, statement) => {
    sent.push(statement.text);
    const result = await (target as typeof db.pool).query(statement.text, statement.values);
    return { rows: result.rows, rowCount: result.rowCount ?? 0 };
  };
}

async function claimThree(queue: string, workerId: string): Promise<ClaimedRow[]> {
  const job = defineJob({
    type: `${queue}.job`,
    queue,
    payload: z.object({ n: z.number() }),
    handler: () => {},
  });
  await client.enqueueMany(
    job,
    [1, 2, 3].map((n) => ({ payload: { n } })),
  );
  const { rows } = await runSql<ClaimedRow>(
    db.pool,
    claimJobs({ queues: [queue], limit: 3, workerId, agingMs: null, asyncCommit: false }),
  );
  expect(rows).toHaveLength(3);
  return rows;
}

describe('batched completions', () => {
  for (const asyncCommit of [false, true]) {
    it(`complete a batch in one statement, and say which jobs were no longer the worker's (asyncCommit ${asyncCommit})`, async () => {
      const queue = `completer-${asyncCommit}`;
      const rows = await claimThree(queue, 'w1');
      // The second job was swept and claimed again by another worker meanwhile.
      await db.pool.query(
        `UPDATE skiplock.jobs SET locked_by = 'w2', attempts = attempts + 1 WHERE id = $1`,
        [rows[1]!.id],
      );
      const sent: string[] = [];
      const completer = new Completer(db.pool, 'w1', asyncCommit, countingRunner(sent), 3, quiet);
      const owned = await Promise.all(
        rows.map((r) => completer.complete({ id: r.id, attempt: r.attempts })),
      );
      expect(owned).toEqual([true, false, true]);
      expect(sent).toHaveLength(1);
      expect((await jobRow(db.pool, rows[0]!.id)).status).toBe('completed');
      expect(await jobRow(db.pool, rows[1]!.id)).toMatchObject({
        status: 'processing',
        locked_by: 'w2',
      });
      expect((await jobRow(db.pool, rows[2]!.id)).status).toBe('completed');

      // A batch the worker still owns whole; and one it owns none of.
      const again = await claimThree(`${queue}-all`, 'w1');
      expect(
        await Promise.all(again.map((r) => completer.complete({ id: r.id, attempt: r.attempts }))),
      ).toEqual([true, true, true]);
      expect(
        await Promise.all(again.map((r) => completer.complete({ id: r.id, attempt: r.attempts }))),
      ).toEqual([false, false, false]);
      expect(sent).toHaveLength(3);
    });
  }

  it('tries a failed write again for the whole batch, one log line per failed write, and fails the batch after its attempts', async () => {
    const target = new URL(db.url);
    const proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
    const pool = new pg.Pool({ connectionString: proxy.urlThrough(db.url), max: 1 });
    pool.on('error', () => {});
    try {
      const rows = await claimThree('completer-retry', 'w1');
      const logs = captureLogs();
      const sent: string[] = [];
      const completer = new Completer(pool, 'w1', false, countingRunner(sent), 8, logs.logger);
      // The network is down: the first writes fail at once; once it is back, the same batch is
      // written, each job completed exactly once.
      proxy.sever();
      const owned = Promise.all(
        rows.map((r) => completer.complete({ id: r.id, attempt: r.attempts })),
      );
      await waitFor(() => sent.length >= 2);
      proxy.resume();
      expect(await owned).toEqual([true, true, true]);
      const retries = logs.lines.filter((l) => l.reason === 'db_error');
      expect(retries.length).toBe(sent.length - 1);
      expect(retries[0]).toMatchObject({
        attempt: 1,
        jobs: 3,
        msg: 'settle write failed; retrying',
      });
      for (const r of rows) expect((await jobRow(db.pool, r.id)).status).toBe('completed');

      // Down for longer than its attempts: the batch's completions fail (the jobs stay leased to
      // the worker, for the sweeper), after exactly `attempts` writes.
      const more = await claimThree('completer-gives-up', 'w1');
      const tries: string[] = [];
      const few = new Completer(pool, 'w1', false, countingRunner(tries), 2, logs.logger);
      proxy.sever();
      const failed = await Promise.allSettled(
        more.map((r) => few.complete({ id: r.id, attempt: r.attempts })),
      );
      expect(failed.map((f) => f.status)).toEqual(['rejected', 'rejected', 'rejected']);
      expect(tries).toHaveLength(2);
      for (const r of more) expect((await jobRow(db.pool, r.id)).status).toBe('processing');
    } finally {
      proxy.resume();
      await pool.end();
      await proxy.close();
    }
  });

  for (const asyncCommit of [false, true]) {
    it(`counts as completed the jobs of a write that committed and lost its answer, when it tries again (asyncCommit ${asyncCommit})`, async () => {
      const rows = await claimThree(`completer-lost-answer-${asyncCommit}`, 'w1');
      // The second job was swept, claimed again and completed by another worker: not w1's.
      await db.pool.query(
        `UPDATE skiplock.jobs SET locked_by = 'w2', attempts = attempts + 1, status = 'completed'
         WHERE id = $1`,
        [rows[1]!.id],
      );
      const sent: string[] = [];
      const runner = countingRunner(sent);
      // The first write commits, then its answer is lost, as on a connection dropped after COMMIT.
      const losing: StatementRunner = async <T>(target: Queryable, statement: Statement) => {
        const result = await runner<T>(target, statement);
        if (sent.length === 1) throw new Error('Connection terminated unexpectedly');
        return result;
      };
      const logs = captureLogs();
      const completer = new Completer(db.pool, 'w1', asyncCommit, losing, 3, logs.logger);
      const owned = await Promise.all(
        rows.map((r) => completer.complete({ id: r.id, attempt: r.attempts })),
      );
      // Before: [false, false, false], each reported lost to another worker though w1 finished it.
      expect(owned).toEqual([true, false, true]);
      expect(sent).toHaveLength(2);
      expect(logs.reasons()).toEqual(['db_error']);
      for (const r of rows) expect((await jobRow(db.pool, r.id)).status).toBe('completed');
    });

    it(`counts the jobs of a failed write still running on the server when it tries again (asyncCommit ${asyncCommit})`, async () => {
      const rows = await claimThree(`completer-in-flight-${asyncCommit}`, 'w1');
      const sent: string[] = [];
      const runner = countingRunner(sent);
      // The first write runs in a transaction the client gave up on, still open on the server
      // when the retry comes; it commits while the retry waits for its rows.
      const stray = await db.pool.connect();
      let strayOpen = false;
      const losing: StatementRunner = async <T>(target: Queryable, statement: Statement) => {
        if (sent.length > 0) return runner<T>(target, statement);
        sent.push(statement.text);
        await stray.query('BEGIN');
        strayOpen = true;
        await stray.query(statement.text, statement.values);
        throw new Error('Connection terminated unexpectedly');
      };
      const logs = captureLogs();
      const completer = new Completer(db.pool, 'w1', asyncCommit, losing, 3, logs.logger);
      try {
        const owned = Promise.all(
          rows.map((r) => completer.complete({ id: r.id, attempt: r.attempts })),
        );
        await waitFor(
          async () => {
            const { rows: waiting } = await db.pool.query<{ n: number }>(
              `SELECT count(*)::int AS n FROM pg_stat_activity
             WHERE wait_event_type = 'Lock' AND datname = current_database()`,
            );
            return waiting[0]!.n > 0;
          },
          { what: 'the retry waiting for the first write' },
        );
        await stray.query('COMMIT');
        strayOpen = false;
        // Before (the rows read in the retry's snapshot): [false, false, false].
        expect(await owned).toEqual([true, true, true]);
        expect(sent).toHaveLength(2);
        for (const r of rows) expect((await jobRow(db.pool, r.id)).status).toBe('completed');
      } finally {
        if (strayOpen) await stray.query('ROLLBACK');
        stray.release();
      }
    });
  }

  it('writes other batches while one waits to be tried again', async () => {
    // A short lock timeout: a batch whose row another transaction holds fails, and is tried again.
    const pool = new pg.Pool({ connectionString: db.url, max: 2, options: '-c lock_timeout=100' });
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    try {
      const [held, free] = await claimThree('completer-apart', 'w1');
      const logs = captureLogs();
      const completer = new Completer(pool, 'w1', false, countingRunner([]), 8, logs.logger);
      await locker.query('BEGIN');
      await locker.query('SELECT 1 FROM skiplock.jobs WHERE id = $1 FOR UPDATE', [held!.id]);
      const order: string[] = [];
      const first = completer
        .complete({ id: held!.id, attempt: held!.attempts })
        .then((owned) => order.push(`held:${owned}`));
      await waitFor(() => logs.lines.some((l) => l.reason === 'db_error'));
      // The held job's batch now waits for its retry; a completion handed in meanwhile is written.
      await completer
        .complete({ id: free!.id, attempt: free!.attempts })
        .then((owned) => order.push(`free:${owned}`));
      expect(order).toEqual(['free:true']);
      await locker.query('ROLLBACK');
      await first;
      expect(order).toEqual(['free:true', 'held:true']);
      await completer.drain();
      for (const r of [held!, free!])
        expect((await jobRow(db.pool, r.id)).status).toBe('completed');
    } finally {
      await locker.end();
      await pool.end();
    }
  });
});
