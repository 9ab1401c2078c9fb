import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSaga } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { waitFor } from '../../../test/support/wait.js';
import { fast, settled, startSagas, timeline } from './fixtures.js';

const db = await useTestDatabase();

describe('a step whose ctx.transaction callback never returns', () => {
  it('is ended by its timeout: the transaction rolls back, the step runs again, the saga completes', async () => {
    let release!: () => void;
    const hang = new Promise<void>((resolve) => (release = resolve));
    let runs = 0;
    let lateQuery: unknown = null;
    const saga = defineSaga({ name: 'stuck-in-tx', version: 1, input: z.object({}) }).step('a', {
      ...fast,
      // Only the first run hangs; the second must finish well inside it, on a loaded machine too.
      timeoutMs: 2_000,
      leaseMs: 60_000,
      run: async (ctx) => {
        runs += 1;
        const first = runs === 1;
        await ctx.transaction(async (tx) => {
          await tx.query(`INSERT INTO step_timeout_writes (run) VALUES ($1)`, [runs]);
          if (first) {
            // A call without a timeout of its own, inside the callback.
            await hang;
            lateQuery = await tx.query('SELECT 1').then(
              () => 'ran',
              (error: unknown) => (error as Error).message,
            );
          }
        });
        return 'a';
      },
    });
    await db.pool.query('CREATE TABLE step_timeout_writes (run int NOT NULL)');
    // Stopped after the test by the fixture.
    const { runtime } = await startSagas(db.pool, [saga]);
    try {
      await runtime.start(saga, { id: 'stuck-1', input: {} });
      // No sweeper runs and the lease is a minute: only the timeout can end the first attempt.
      const view = await settled(runtime, 'stuck-1');
      expect(view.status).toBe('completed');
      expect(timeline(view)).toEqual(['a:completed']);
      expect(runs).toBe(2);
      // The first run's write rolled back with its transaction; the second's committed.
      const { rows } = await db.pool.query<{ run: number }>('SELECT run FROM step_timeout_writes');
      expect(rows).toEqual([{ run: 2 }]);
      // The hung callback, going on later, finds its connection closed, not another's.
      release();
      await waitFor(() => lateQuery);
      expect(lateQuery).not.toBe('ran');
    } finally {
      release();
    }
  });
});
