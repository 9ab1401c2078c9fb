import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../../test/support/db.js';
import { runInProcess } from './run-cli.js';

const db = await useTestDatabase();
const env = { DATABASE_URL: db.url };

describe('skiplock sagas list past its scan window', () => {
  it('says that older sagas may match when a page comes back empty with a cursor', async () => {
    // One failed saga older than 20,001 completed ones of its name: a page looks at 20,000.
    await db.pool.query(
      `INSERT INTO skiplock.sagas (id, name, version, status, input, created_at)
       VALUES ('old-failed', 'order', 1, 'failed', '{}', now() - interval '1 day')`,
    );
    await db.pool.query(
      `INSERT INTO skiplock.sagas (id, name, version, status, input, created_at)
       SELECT 'done-' || g, 'order', 1, 'completed', '{}',
              now() - interval '1 hour' + g * interval '1 ms'
       FROM generate_series(1, 20001) AS g`,
    );
    const args = ['sagas', 'list', '--name', 'order', '--status', 'failed'];
    const human = await runInProcess(args, env);
    const json = JSON.parse((await runInProcess([...args, '--json'], env)).stdout) as {
      sagas: unknown[];
      nextCursor: string | null;
    };
    expect(json).toMatchObject({ sagas: [], nextCursor: expect.any(String) });
    // Before: "no sagas match", exit 0, and no cursor to go on with.
    expect(human).toMatchObject({ code: 0 });
    expect(human.stdout).toBe(
      `no match among the sagas searched so far; search older: skiplock sagas list --cursor ${json.nextCursor} ...\n`,
    );
    const older = await runInProcess([...args, '--cursor', json.nextCursor!, '--json'], env);
    expect((JSON.parse(older.stdout) as { sagas: { id: string }[] }).sagas).toMatchObject([
      { id: 'old-failed' },
    ]);
  }, 120_000);
});
