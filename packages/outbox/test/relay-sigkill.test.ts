import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { publishMany } from '../src/index.js';
import { ensureStream } from '../src/sinks/nats.js';
import { afterAll, describe, expect, it } from 'vitest';
import { brokerAvailable, natsUrl } from './brokers.js';
import { readStream } from './jetstream.js';
import { bundleForNode } from '../../../test/support/bundle.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { spawnNode, type ChildHandle } from '../../../test/support/processes.js';
import { waitFor } from '../../../test/support/wait.js';

const available = await brokerAvailable('NATS', natsUrl, 4222);
/** Published in batches of 100 every 200 ms, more while fewer than MIN_KILLS kills landed. */
const BATCHES = 30;
const PER_BATCH = 100;
/** Batches at most, however few kills landed (a machine too loaded to kill in time). */
const MAX_BATCHES = 150;
const KEYS = 100;
const RELAYS = 3;
const KILLS = 6;
const MIN_KILLS = 3;

describe.skipIf(!available)('outbox relay processes killed with SIGKILL', () => {
  const closers: (() => Promise<unknown>)[] = [];
  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => {});
  });

  it('deliver every event; JetStream holds each once, in key order, though some went out twice', async () => {
    const db = await useTestDatabase();
    const tag = randomUUID().replaceAll('-', '').slice(0, 12);
    const stream = `OUTBOX_KILL_${tag}`;
    const topic = `outbox-kill.${tag}.events`;
    const nc = await connect({ servers: natsUrl });
    closers.push(() => nc.close());
    await ensureStream({ connection: nc, name: stream, subjects: [`outbox-kill.${tag}.>`] });
    closers.push(async () => (await jetstreamManager(nc)).streams.delete(stream));

    const script = await bundleForNode(new URL('./relay-process.ts', import.meta.url));
    const relays: ChildHandle[] = [];
    const killed = new Set<ChildHandle>();
    const unexpected: string[] = [];
    const launch = async () => {
      const handle = spawnNode(`relay-${relays.length + 1}`, script, {
        DATABASE_URL: db.url,
        NATS_URL: natsUrl,
        RELAY_TOPIC: topic,
        RELAY_MSG_ID_PREFIX: `${tag}-`,
        // The window between the broker's acks and the settle a kill must land in; the kill
        // follows the batch's log line through a pipe, which takes more than 100 ms under load.
        RELAY_STALL_MS: '400',
      });
      relays.push(handle);
      void handle.exited.then(({ code, signal }) => {
        if (!killed.has(handle) && signal !== 'SIGTERM' && code !== 0) {
          unexpected.push(`${handle.name} exited ${code ?? signal}: ${handle.stderrTail()}`);
        }
      });
      await handle.waitForLine((l) => l.reason === 'relay_ready', 60_000);
      return handle;
    };
    await Promise.all(Array.from({ length: RELAYS }, launch));
    closers.push(async () => {
      for (const r of relays) if (!r.hasExited) r.kill('SIGKILL');
    });

    // Published at a steady pace while the relays run and get killed; on past BATCHES until
    // MIN_KILLS kills landed, so a slow machine's fewer kill chances do not fail the test.
    const published: { key: string; n: number }[] = [];
    let publishing = true;
    let kills = 0;
    const producer = (async () => {
      for (let t = 0; t < MAX_BATCHES && (t < BATCHES || kills < MIN_KILLS); t++) {
        const batch = Array.from({ length: PER_BATCH }, (_, i) => {
          const n = t * PER_BATCH + i;
          return { key: `key-${n % KEYS}`, n };
        });
        await publishMany(
          db.pool,
          batch.map((m) => ({ topic, key: m.key, payload: { n: m.n } })),
        );
        published.push(...batch);
        await delay(200);
      }
      publishing = false;
    })();

    // Each kill lands right after a relay's batch was acknowledged by the stream and before its
    // settle: those messages are published but still leased to the dead relay.
    const started: Promise<unknown>[] = [];
    // Victims are taken in turn from the relays that are ready, the next one after each wait
    // that saw no batch: waiting on the same relay again, one still starting or one the others
    // left no batch to, let a loaded run end with 2 kills (CI-like load, 1 run in 4).
    let turn = 0;
    while (publishing && kills < KILLS) {
      const ready = relays.filter(
        (r) => !r.hasExited && !killed.has(r) && r.lines.some((l) => l.reason === 'relay_ready'),
      );
      if (ready.length === 0) {
        await delay(50);
        continue;
      }
      const victim = ready[turn++ % ready.length]!;
      const seen = victim.lines.length;
      const acked = await victim
        .waitForLine((l) => l.reason === 'test_delivered' && victim.lines.indexOf(l) >= seen, 5_000)
        .then(
          () => true,
          () => false,
        );
      if (!acked) continue;
      killed.add(victim);
      victim.kill('SIGKILL');
      kills += 1;
      // Not awaited: a replacement's start-up under load would eat the publishing time.
      started.push(launch());
      await delay(200 + Math.random() * 400);
    }
    await producer;
    await Promise.all(started);
    expect(kills).toBeGreaterThanOrEqual(MIN_KILLS);

    await waitFor(
      async () => {
        if (unexpected.length > 0) throw new Error(unexpected.join('\n'));
        const { rows } = await db.pool.query<{ left: number }>(
          `SELECT count(*)::int AS left FROM skiplock.outbox_messages WHERE status <> 'delivered'`,
        );
        return rows[0]?.left === 0;
      },
      { timeoutMs: 120_000, what: 'every event delivered' },
    );
    const { rows } = await db.pool.query<{ again: number; dead: number }>(
      `SELECT count(*) FILTER (WHERE attempts > 1)::int AS again,
              count(*) FILTER (WHERE status = 'dead')::int AS dead
       FROM skiplock.outbox_messages`,
    );
    // Messages the killed relays had published were sent again by another relay.
    expect(rows[0]?.again).toBeGreaterThan(0);
    expect(rows[0]?.dead).toBe(0);

    const messages = await readStream(nc, stream);
    const ids = messages.map((m) => m.headers?.get('Nats-Msg-Id'));
    expect(messages).toHaveLength(published.length);
    expect(new Set(ids).size).toBe(published.length);
    const byKey = new Map<string, number[]>();
    for (const m of messages) {
      const key = m.headers?.get('skiplock-key') ?? '';
      byKey.set(key, [...(byKey.get(key) ?? []), (m.json() as { n: number }).n]);
    }
    for (let k = 0; k < KEYS; k++) {
      const key = `key-${k}`;
      expect(byKey.get(key), key).toEqual(published.filter((p) => p.key === key).map((p) => p.n));
    }
    console.log(
      `[outbox sigkill] ${kills} relays killed mid-batch; ${rows[0]?.again} events sent twice, ` +
        `each stored once (Nats-Msg-Id)`,
    );
    for (const r of relays.filter((r) => !r.hasExited)) r.kill('SIGTERM');
    await Promise.all(relays.map((r) => r.exited));
    expect(unexpected).toEqual([]);
  });
});
