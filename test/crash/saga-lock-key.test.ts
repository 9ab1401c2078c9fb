import { setTimeout as delay } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { bundleForNode } from '../support/bundle.js';
import { useTestDatabase } from '../support/db.js';
import { spawnNode, type ChildHandle } from '../support/processes.js';
import { waitFor } from '../support/wait.js';
import { LOCK_SCHEMA_SQL } from './saga-lock.js';

const PROCESSES = 4;
const SAGAS_EACH = 40;
const KEYS = 3;

interface Turn {
  saga_id: string;
  account: string;
  status: string;
  seq: number;
  enters: number;
  leaves: number;
  undos: number;
  entered: string | null;
  left: string | null;
}

describe('one active saga per lock key across processes', () => {
  it('4 processes starting 160 sagas over 3 keys at once never run two of a key together, through a SIGKILL', async () => {
    const db = await useTestDatabase();
    await db.pool.query(LOCK_SCHEMA_SQL);
    const script = await bundleForNode(new URL('./saga-lock-process.ts', import.meta.url));
    const startAt = Date.now() + 4_000;
    const env = {
      DATABASE_URL: db.url,
      SAGAS: `${SAGAS_EACH}`,
      KEYS: `${KEYS}`,
      START_AT: `${startAt}`,
    };
    const procs: ChildHandle[] = Array.from({ length: PROCESSES }, (_, i) =>
      spawnNode(`lock-${i}`, script, { ...env, PROC: `p${i}` }),
    );
    await Promise.all(procs.map((p) => p.waitForLine((l) => l.reason === 'starts_done', 60_000)));
    // Kill one process while sagas of every key are moving: its steps come back on the others.
    await delay(300);
    procs[0]!.kill('SIGKILL');
    await procs[0]!.exited;

    const total = PROCESSES * SAGAS_EACH;
    const read = async () =>
      (
        await db.pool.query<Turn>(`
          SELECT s.id AS saga_id, s.lock_key AS account, s.status,
                 (SELECT seq::int FROM saga_lock.starts st WHERE st.saga_id = s.id) AS seq,
                 count(*) FILTER (WHERE t.what = 'enter')::int AS enters,
                 count(*) FILTER (WHERE t.what = 'leave')::int AS leaves,
                 count(*) FILTER (WHERE t.what = 'undo')::int AS undos,
                 to_char(min(t.at) FILTER (WHERE t.what = 'enter'), 'YYYY-MM-DD HH24:MI:SS.US') AS entered,
                 to_char(min(t.at) FILTER (WHERE t.what <> 'enter'), 'YYYY-MM-DD HH24:MI:SS.US') AS left
          FROM skiplock.sagas s LEFT JOIN saga_lock.turns t ON t.saga_id = s.id
          GROUP BY s.id ORDER BY s.lock_key, seq`)
      ).rows;
    const rows = await waitFor(
      async () => {
        const r = await read();
        return r.length === total &&
          r.every((x) => x.status === 'completed' || x.status === 'compensated')
          ? r
          : null;
      },
      { what: `${total} sagas to end`, timeoutMs: 120_000 },
    );
    for (const p of procs.slice(1)) p.kill('SIGTERM');

    // Every saga ended as its input said, with each recorded effect once.
    for (const r of rows) {
      const fail = Number(r.saga_id.split('-')[1]) % 7 === 3;
      expect({
        id: r.saga_id,
        status: r.status,
        enters: r.enters,
        leaves: r.leaves,
        undos: r.undos,
      }).toEqual({
        id: r.saga_id,
        status: fail ? 'compensated' : 'completed',
        enters: 1,
        leaves: fail ? 0 : 1,
        undos: fail ? 1 : 0,
      });
    }
    // Per key: the turns never overlap, and they come in the order the starts took the key (as
    // the trigger recorded it, not as the runtime's own created_at says).
    for (let k = 0; k < KEYS; k++) {
      const mine = rows.filter((r) => r.account === `acct-${k}`);
      expect(mine.length).toBeGreaterThan(40);
      const byEntry = [...mine].sort((a, b) => a.entered!.localeCompare(b.entered!));
      expect(byEntry.map((r) => r.saga_id)).toEqual(mine.map((r) => r.saga_id));
      for (let i = 1; i < byEntry.length; i++) {
        expect(
          byEntry[i]!.entered! > byEntry[i - 1]!.left!,
          `${byEntry[i]!.saga_id} entered before ${byEntry[i - 1]!.saga_id} left`,
        ).toBe(true);
      }
    }
    // The starts met: every process's burst queued sagas behind other processes' sagas.
    const owners = new Set(rows.slice(0, 20).map((r) => r.saga_id.split('-')[0]));
    expect(owners.size).toBeGreaterThan(1);
  });
});
