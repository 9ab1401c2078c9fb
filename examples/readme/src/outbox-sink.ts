// A sink of your own: the outbox README's sink snippet, as a complete program. A Kafka producer,
// an SQS client or anything with an acknowledgement fits the same shape.
// Run: DATABASE_URL=postgres://... npx tsx outbox-sink.ts
import { appendFile, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { createRelay, failed, migrate, publishMany, type Sink } from '@skiplock/outbox';

/** Appends each message as a JSON line; the write's completion is its acknowledgement. */
function jsonLinesSink(path: string): Sink {
  return {
    name: 'json-lines',
    async deliver(messages, signal) {
      // One result per message, in the batch's order; a throw would fail (and retry) them all.
      return Promise.all(
        messages.map(async (m) => {
          try {
            signal.throwIfAborted();
            const line = { id: m.id, topic: m.topic, key: m.key, payload: m.payload };
            await appendFile(path, `${JSON.stringify(line)}\n`);
            return { ok: true as const };
          } catch (error) {
            return failed(error);
          }
        }),
      );
    },
    async close() {},
  };
}

const pool = new pg.Pool({ connectionString: process.env['DATABASE_URL'] });
await migrate({ pool });
await publishMany(pool, [
  { topic: 'sink.demo', key: 'a', payload: { step: 1 } },
  { topic: 'sink.demo', key: 'a', payload: { step: 2 } },
]);
const path = join(tmpdir(), `outbox-sink-${process.pid}.jsonl`);
const relay = createRelay({ pool, sink: jsonLinesSink(path), topics: ['sink.demo'] });
// runOnce() is one claim, delivery and settle: a key's second message waits for its first.
const passes = [await relay.runOnce(), await relay.runOnce(), await relay.runOnce()];
console.log(`delivered per pass: ${passes.map((p) => p.delivered).join(', ')}`);
console.log(`file:\n${(await readFile(path, 'utf8')).trim()}`);
await rm(path);
await relay.stop();
await pool.end();
