import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type pg from 'pg';
import { computeBackoffMs, type BackoffOptions, type Logger } from '@skiplock/queue';
import {
  createDefaultLogger,
  errorMessage,
  IntervalService,
  Listener,
  resolvePool,
  retryDelayMs,
  runSql,
  sleep,
  withJitter,
} from '@skiplock/queue/engine';
import type { Delivery, OutboxMessage, Sink } from './sink.js';
import {
  claimMessages,
  deleteDelivered,
  OUTBOX_CHANNEL,
  settleMessages,
  type ClaimedRow,
} from './sql/messages.js';

export interface RelayOptions {
  pool?: pg.Pool | undefined;
  /** Used when no pool is given; defaults to `$DATABASE_URL`. */
  connectionString?: string | undefined;
  sink: Sink;
  /** Relay only these topics (default: all). Key order still spans topics. */
  topics?: readonly string[] | undefined;
  /** Messages per claim (default 100). */
  batchSize?: number | undefined;
  /** Batches in flight at once, each claimed, delivered and settled on its own (default 2). */
  concurrency?: number | undefined;
  /**
   * How long a claim holds its messages (default 30 s). A relay that dies holding them frees
   * them when it runs out; the sink gets half of it to deliver, so a live relay settles first.
   */
  leaseMs?: number | undefined;
  /** Delivery attempts before a message goes dead (default 10). */
  maxAttempts?: number | undefined;
  /** Delay before the next attempt; a receiver's `Retry-After` wins when it is longer. */
  backoff?: BackoffOptions | undefined;
  /** Poll interval when no notification arrives (default 1 s). */
  pollIntervalMs?: number | undefined;
  /** Keep delivered messages this long (default 24 h); dead ones stay until retried or deleted. */
  retainDeliveredMs?: number | undefined;
  /** How often retention runs (default 60 s). */
  retentionIntervalMs?: number | undefined;
  /** LISTEN for publishes (default true); polling alone otherwise. */
  listen?: boolean | undefined;
  /** Names this relay in `locked_by` and logs (default host:pid:random). */
  name?: string | undefined;
  logger?: Logger | undefined;
}

export interface RelayPassResult {
  claimed: number;
  delivered: number;
  /** Failed and due again after their backoff. */
  retried: number;
  dead: number;
  /** Settles the lease fence refused: another relay had taken the message after this one's lease ran out. */
  fenced: number;
}

export interface RetentionResult {
  deleted: number;
}

export interface Relay {
  readonly name: string;
  start(): void;
  /**
   * Stops claiming, then waits up to `timeoutMs` (default 30 s) for batches in flight to be
   * delivered and settled; past it their deliveries are aborted and settled as failed attempts
   * (due again after their backoff). Closes what the relay opened, never the sink.
   */
  stop(options?: { timeoutMs?: number }): Promise<void>;
  /** One claim, delivery and settle; what tests and `skiplock outbox relay --once` call. */
  runOnce(): Promise<RelayPassResult>;
  /** One bounded retention pass. */
  retainOnce(): Promise<RetentionResult>;
}

const defaultBackoff: BackoffOptions = { baseMs: 1_000, maxMs: 300_000, factor: 2, jitter: 0.5 };
/** Rows one retention statement deletes; a big backlog is worked off over several passes. */
const RETENTION_BATCH = 5_000;
/** Passes in a row a retention run makes before yielding to its interval. */
const RETENTION_ROUNDS = 20;
const MAX_RETRY_AFTER_MS = 3_600_000;

/**
 * Relays outbox messages to a sink: claims a batch under a lease (SKIP LOCKED, first message of
 * each key only), delivers it, and settles every message in one fenced statement. Several relays,
 * in one process or many, may run against one database.
 */
export function createRelay(options: RelayOptions): Relay {
  const logger = options.logger ?? createDefaultLogger('skiplock-outbox');
  const owned = resolvePool(options, logger, 'outbox-relay');
  const pool = owned.pool;
  const sink = options.sink;
  const batchSize = positive('batchSize', options.batchSize ?? 100, 10_000);
  const lanes = positive('concurrency', options.concurrency ?? 2, 64);
  const leaseMs = positive('leaseMs', options.leaseMs ?? 30_000, 86_400_000);
  const maxAttempts = positive('maxAttempts', options.maxAttempts ?? 10, 1_000);
  const pollMs = positive('pollIntervalMs', options.pollIntervalMs ?? 1_000, 3_600_000);
  const retainMs = positive('retainDeliveredMs', options.retainDeliveredMs ?? 86_400_000, 2 ** 40);
  const backoff = options.backoff ?? defaultBackoff;
  const topics = options.topics ? [...options.topics] : null;
  const name = options.name ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;

  // Aborted by stop() once its grace period is over: deliveries in flight give up.
  const hardStop = new AbortController();
  const stopping = new AbortController();
  // Lanes asleep until a notification (or their poll) wakes them.
  const sleepers = new Set<() => void>();
  let wakeups = 0;
  const notified = () => {
    wakeups += 1;
    for (const wake of sleepers) wake();
  };

  async function runOnce(): Promise<RelayPassResult> {
    const result: RelayPassResult = { claimed: 0, delivered: 0, retried: 0, dead: 0, fenced: 0 };
    const leaseId = randomUUID();
    const { rows } = await runSql<ClaimedRow>(
      pool,
      claimMessages({ limit: batchSize, leaseId, leaseMs, relay: name, topics }),
    );
    if (rows.length === 0) return result;
    rows.sort((a, b) => (BigInt(a.id) < BigInt(b.id) ? -1 : 1));
    result.claimed = rows.length;
    const messages = rows.map(toMessage);
    const deliveries = await deliver(messages);
    const outcome = {
      ids: [] as string[],
      ok: [] as boolean[],
      dead: [] as boolean[],
      delayMs: [] as number[],
      errors: [] as (string | null)[],
    };
    for (const [i, message] of messages.entries()) {
      const delivery = deliveries[i] ?? { ok: false, error: 'the sink returned no result for it' };
      outcome.ids.push(message.id);
      outcome.ok.push(delivery.ok);
      if (delivery.ok) {
        outcome.dead.push(false);
        outcome.delayMs.push(0);
        outcome.errors.push(null);
        result.delivered += 1;
        continue;
      }
      const dead = delivery.permanent === true || message.attempt >= maxAttempts;
      const delay = Math.max(
        computeBackoffMs(message.attempt, backoff),
        Math.min(delivery.retryAfterMs ?? 0, MAX_RETRY_AFTER_MS),
      );
      outcome.dead.push(dead);
      outcome.delayMs.push(dead ? 0 : delay);
      outcome.errors.push(delivery.error);
      const fields = {
        id: message.id,
        topic: message.topic,
        attempt: message.attempt,
        sink: sink.name,
        err: delivery.error,
      };
      if (dead) {
        result.dead += 1;
        logger.error(
          {
            reason: delivery.permanent ? 'outbox_dead_permanent' : 'outbox_dead_attempts',
            ...fields,
          },
          'outbox message dead',
        );
      } else {
        result.retried += 1;
        logger.warn(
          { reason: 'outbox_retry', delayMs: delay, ...fields },
          'outbox delivery failed; will retry',
        );
      }
    }
    const settled = await runSql<{ id: string }>(pool, settleMessages(leaseId, outcome));
    result.fenced = rows.length - settled.rowCount;
    if (result.fenced > 0) {
      logger.warn(
        { reason: 'outbox_lease_lost', count: result.fenced, sink: sink.name },
        'lease ran out before the settle; another relay took the messages',
      );
    }
    return result;
  }

  /** The sink's deliveries, or every message failed when the sink throws or misbehaves. */
  async function deliver(messages: OutboxMessage[]): Promise<Delivery[]> {
    const signal = AbortSignal.any([
      hardStop.signal,
      AbortSignal.timeout(Math.max(1, Math.floor(leaseMs / 2))),
    ]);
    try {
      const deliveries = await sink.deliver(messages, signal);
      if (!Array.isArray(deliveries) || deliveries.length !== messages.length) {
        throw new Error(
          `sink ${sink.name} returned ${Array.isArray(deliveries) ? deliveries.length : 'no'} results for ${messages.length} messages`,
        );
      }
      return deliveries;
    } catch (error) {
      const text = errorMessage(error);
      logger.warn(
        { reason: 'outbox_batch_failed', sink: sink.name, count: messages.length, err: text },
        'sink failed a whole batch',
      );
      return messages.map(() => ({ ok: false, error: text }));
    }
  }

  const retention = new IntervalService<RetentionResult>(
    'outbox-retention',
    options.retentionIntervalMs ?? 60_000,
    async () => {
      let deleted = 0;
      for (let round = 0; round < RETENTION_ROUNDS; round++) {
        const { rowCount } = await runSql(pool, deleteDelivered(retainMs, RETENTION_BATCH));
        deleted += rowCount;
        if (rowCount < RETENTION_BATCH) break;
      }
      if (deleted > 0)
        logger.info({ reason: 'outbox_retention', deleted }, 'deleted delivered messages');
      return { deleted };
    },
    logger,
  );

  const listener =
    options.listen === false
      ? null
      : new Listener({
          connection: pool.options as pg.ClientConfig,
          channels: [OUTBOX_CHANNEL],
          onNotify: notified,
          logger,
        });

  /** One lane: claims while there is work, then sleeps until a notification or the poll. */
  async function lane(): Promise<void> {
    let failures = 0;
    while (!stopping.signal.aborted) {
      const seen = wakeups;
      let result: RelayPassResult;
      try {
        result = await runOnce();
        failures = 0;
      } catch (error) {
        failures += 1;
        logger.warn(
          { reason: 'db_error', service: 'outbox-relay', err: errorMessage(error) },
          'relay pass failed',
        );
        await sleep(Math.max(retryDelayMs(failures, pollMs), 100), stopping.signal);
        continue;
      }
      // A delivered message may have freed the next one of its key: look again at once.
      if (result.claimed > 0) continue;
      if (wakeups !== seen) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, withJitter(pollMs, 0.2));
        function done() {
          clearTimeout(timer);
          sleepers.delete(done);
          stopping.signal.removeEventListener('abort', done);
          resolve();
        }
        sleepers.add(done);
        stopping.signal.addEventListener('abort', done, { once: true });
      });
    }
  }

  let running: Promise<void>[] | null = null;
  return {
    name,
    start() {
      if (running) return;
      listener?.start();
      retention.start();
      running = Array.from({ length: lanes }, () => lane());
      logger.info(
        { reason: 'outbox_relay_started', relay: name, sink: sink.name, lanes, batchSize },
        'outbox relay started',
      );
    },
    async stop({ timeoutMs = 30_000 } = {}) {
      stopping.abort();
      const graceful = Promise.all(running ?? []);
      const timer = setTimeout(() => hardStop.abort(), timeoutMs);
      try {
        await graceful;
      } finally {
        clearTimeout(timer);
      }
      await Promise.all([listener?.stop(), retention.stop()]);
      await owned.release();
      logger.info({ reason: 'outbox_relay_stopped', relay: name }, 'outbox relay stopped');
    },
    runOnce,
    retainOnce: () => retention.runOnce(),
  };
}

function toMessage(row: ClaimedRow): OutboxMessage {
  return {
    id: row.id,
    topic: row.topic,
    key: row.key,
    payload: row.payload,
    headers: row.headers,
    attempt: row.attempts,
    createdAt: row.created_at,
  };
}

function positive(option: string, value: number, max: number): number {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new TypeError(
      `createRelay: ${option} must be an integer from 1 to ${max}, got ${String(value)}`,
    );
  }
  return value;
}
