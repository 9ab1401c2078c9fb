/**
 * A relay draining a backlog spread over few or many keys: how the claim scales with the messages
 * queued behind each key's first one (`@skiplock/outbox` parks them; packages/outbox/README.md
 * keeps the figures). One relay, a sink that acknowledges at once, each configuration in a fresh
 * database, one after the other in one run, so compare them side by side.
 *
 *   pnpm --filter @skiplock/bench relay-backlog [--keys 10,1000] [--messages 20000]
 *     [--vacuum-every 0] [--timeout-s 120]
 *
 * `--vacuum-every N` runs `VACUUM (ANALYZE)` on the table every N passes, for a server whose
 * autovacuum is off (this machine's is): parking leaves dead index entries behind.
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { pino } from 'pino';
import { createRelay, type Sink } from '@skiplock/outbox';
import { fillOutbox, outboxDatabase } from './scenarios/relay.js';
import { resolveServer } from './server.js';
import { dropTemplates } from './templates.js';

const { values } = parseArgs({
  options: {
    keys: { type: 'string', default: '10,1000' },
    messages: { type: 'string', default: '20000' },
    'vacuum-every': { type: 'string', default: '0' },
    'timeout-s': { type: 'string', default: '120' },
  },
});
const keyCounts = values.keys.split(',').map(Number);
const messages = Number(values.messages);
const vacuumEvery = Number(values['vacuum-every']);
const timeoutMs = Number(values['timeout-s']) * 1_000;
for (const [name, n] of [
  ['--keys', Math.min(...keyCounts)],
  ['--messages', messages],
  ['--timeout-s', timeoutMs],
] as const) {
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`${name} must be positive integers`);
}
if (!Number.isSafeInteger(vacuumEvery) || vacuumEvery < 0) {
  throw new Error('--vacuum-every must be 0 (never) or a positive integer');
}

const logger = pino({ level: 'silent' });
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;

async function drain(adminUrl: string, keys: number) {
  const db = await outboxDatabase(adminUrl);
  const pool = new pg.Pool({ connectionString: db.url, max: 4 });
  pool.on('error', () => {});
  try {
    await fillOutbox(db.url, messages, keys);
    let outOfOrder = 0;
    const last = new Map<string, number>();
    const sink: Sink = {
      name: 'ack',
      deliver: async (batch) => {
        for (const m of batch) {
          const i = (m.payload as { i: number }).i;
          if ((last.get(m.key!) ?? -1) > i) outOfOrder += 1;
          last.set(m.key!, i);
        }
        return batch.map(() => ({ ok: true as const }));
      },
      close: async () => {},
    };
    const relay = createRelay({ pool, sink, logger, batchSize: 100 });
    const passes: number[] = [];
    let delivered = 0;
    const start = performance.now();
    while (delivered < messages && performance.now() - start < timeoutMs) {
      const t = performance.now();
      delivered += (await relay.runOnce()).delivered;
      passes.push(performance.now() - t);
      if (vacuumEvery > 0 && passes.length % vacuumEvery === 0) {
        await pool.query('VACUUM (ANALYZE) skiplock.outbox_messages');
      }
    }
    const seconds = (performance.now() - start) / 1_000;
    return {
      keys,
      messages,
      delivered,
      seconds: Number(seconds.toFixed(2)),
      perSecond: Math.round(delivered / seconds),
      passes: passes.length,
      passP50Ms: Number(median(passes).toFixed(2)),
      outOfOrder,
    };
  } finally {
    await pool.end();
    await db.drop();
  }
}

const server = await resolveServer(() => {});
try {
  for (const keys of keyCounts) console.log(JSON.stringify(await drain(server.adminUrl, keys)));
} finally {
  await dropTemplates();
  await server.stop();
}
