import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OutboxMessage } from '../../packages/outbox/src/sink.js';
import { rabbitmqSink } from '../../packages/outbox/src/sinks/rabbitmq.js';
import { amqpUrl, brokerAvailable } from '../../packages/outbox/test/brokers.js';
import { captureLogs } from '../support/db.js';
import { waitFor } from '../support/wait.js';

// In the crash project, which runs one file at a time after the suite: a disk alarm blocks every
// publishing connection of the broker, and no other test may publish meanwhile.
const available = await brokerAvailable('RabbitMQ', amqpUrl, 5672);
const run = promisify(execFile);

function message(id: number): OutboxMessage {
  return {
    id: String(id),
    topic: 'alarm.test',
    key: `k${id}`,
    payload: { id },
    headers: {},
    attempt: 1,
    createdAt: new Date(),
  };
}

/** The broker's disk free limit in bytes, to put back after the alarm. */
async function diskFreeLimit(): Promise<string> {
  const { stdout } = await run('rabbitmqctl', [
    'eval',
    'rabbit_disk_monitor:get_disk_free_limit().',
  ]);
  const bytes = stdout.trim();
  if (!/^\d+$/.test(bytes)) throw new Error(`unexpected disk free limit: ${bytes}`);
  return bytes;
}

describe.skipIf(!available)('rabbitmqSink under a broker resource alarm', () => {
  let limit: string;

  beforeAll(async () => {
    limit = await diskFreeLimit();
  });

  afterAll(async () => {
    // Whatever happened above, the broker must not stay blocked for the tests that follow.
    await run('rabbitmqctl', ['set_disk_free_limit', limit]);
  });

  it('charges no attempt for what a blocked broker left unconfirmed, and sends on once unblocked', async () => {
    const logs = captureLogs();
    // The broker's own exchange, no queue bound, not mandatory: a confirm is all this test reads.
    const sink = rabbitmqSink({
      url: amqpUrl,
      exchange: 'amq.topic',
      mandatory: false,
      logger: logs.logger,
    });
    try {
      expect(await sink.deliver([message(1)], AbortSignal.timeout(10_000))).toEqual([{ ok: true }]);
      // A limit far above any disk's free space: the broker raises its disk alarm and blocks
      // every connection that publishes.
      await run('rabbitmqctl', ['set_disk_free_limit', '1000000GB']);
      // Published before the sink heard of the block: taken, never confirmed. Before: each
      // counted an attempt at the deadline, and a long alarm sent messages dead.
      const during = await sink.deliver([message(2), message(3)], AbortSignal.timeout(2_000));
      expect(during).toEqual([
        expect.objectContaining({ ok: false, unavailable: true }),
        expect.objectContaining({ ok: false, unavailable: true }),
      ]);
      await waitFor(() => logs.reasons().includes('amqp_blocked'), { timeoutMs: 10_000 });
      // Blocked now: not sent at all, and not charged either.
      const blocked = await sink.deliver([message(4)], AbortSignal.timeout(2_000));
      expect(blocked).toEqual([
        {
          ok: false,
          error: expect.stringMatching(/^broker blocks publishing \(.*disk/i),
          unavailable: true,
          notSent: true,
        },
      ]);
      // A second sink blocked as well, closed during the alarm: before, close() waited for the
      // broker's answer, which it sends only once the alarm clears.
      const other = rabbitmqSink({ url: amqpUrl, exchange: 'amq.topic', mandatory: false });
      await other.deliver([message(5)], AbortSignal.timeout(1_500));
      const closing = other.close().then(() => 'closed');
      expect(
        await Promise.race([closing, new Promise((r) => setTimeout(() => r('hung'), 8_000))]),
      ).toBe('closed');
      await run('rabbitmqctl', ['set_disk_free_limit', limit]);
      await waitFor(() => logs.reasons().includes('amqp_unblocked'), { timeoutMs: 10_000 });
      expect(await sink.deliver([message(4)], AbortSignal.timeout(10_000))).toEqual([{ ok: true }]);
    } finally {
      await sink.close();
    }
  });
});
