import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type pg from 'pg';
import { computeBackoffMs, type BackoffOptions, type Logger } from '@skiplock/queue';
import {
  createDefaultLogger,
  detached,
  errorMessage,
  IntervalService,
  Listener,
  namedStatement,
  preparedRunner,
  resolvePool,
  retryDelayMs,
  runSql,
  sleep,
  storableText,
  withJitter,
  type Statement,
} from '@skiplock/queue/engine';
import type { Delivery, OutboxMessage, Sink } from './sink.js';
import {
  claimMessages,
  deleteDelivered,
  expireLastAttempts,
  OUTBOX_CHANNEL,
  settleDelivered,
  settleMessages,
  UNSTALL_PAGE,
  unparkStalledKeys,
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
  /**
   * Delivery attempts before a message goes dead (default 10). A delivery the sink reports
   * `unavailable` (its broker down or the connection lost) is not one.
   */
  maxAttempts?: number | undefined;
  /**
   * Delay before the next attempt; a receiver's `Retry-After` wins when it is longer. While the
   * sink reports its broker unavailable, the same curve over the batches failed so in a row is
   * the relay's outage backoff.
   */
  backoff?: BackoffOptions | undefined;
  /** Poll interval when no notification arrives (default 1 s). */
  pollIntervalMs?: number | undefined;
  /**
   * Keep delivered messages this long (default 24 h); dead ones stay until retried or deleted.
   * Retention is the table's, whatever the topics: relays sharing it share the shortest.
   */
  retainDeliveredMs?: number | undefined;
  /** How often retention runs (default 60 s). */
  retentionIntervalMs?: number | undefined;
  /** LISTEN for publishes (default true); polling alone otherwise. */
  listen?: boolean | undefined;
  /**
   * Claims and settles commit without waiting for the WAL flush (default true), as the queue's
   * worker does. A PostgreSQL crash can then forget the last few hundred milliseconds of them:
   * a forgotten claim only loses its lease, a forgotten settle delivers those messages again,
   * with the same message ids (at least once, as always). Never a message lost: the publisher's
   * transaction keeps the server's setting.
   */
  asyncCommit?: boolean | undefined;
  /** Claim and settle as named prepared statements (default true; off behind PgBouncer < 1.21). */
  preparedStatements?: boolean | undefined;
  /** Names this relay in `locked_by` and logs (default host:pid:random). */
  name?: string | undefined;
  logger?: Logger | undefined;
}

export interface RelayPassResult {
  claimed: number;
  delivered: number;
  /** Failed and due again after their backoff. */
  retried: number;
  /**
   * Of `retried`: failed because the sink could not reach its broker (`unavailable`); their
   * attempt was given back and they wait out the relay's outage backoff.
   */
  unavailable: number;
  dead: number;
  /** Settles the lease fence refused: another relay had taken the message after this one's lease ran out. */
  fenced: number;
}

export interface RetentionResult {
  /** Delivered messages past `retainDeliveredMs`, deleted. */
  deleted: number;
  /**
   * Messages of this relay's topics out of attempts and not leased, sent to dead: their last
   * attempt's lease ran out (their relay died), or `maxAttempts` was lowered below their count.
   */
  expired: number;
  /**
   * Keys whose parked messages had nothing before them, their next message made due again (see
   * "Long backlogs on a few keys" in the README: a relay of an earlier version leaves keys so).
   */
  unstalled: number;
}

export interface Relay {
  readonly name: string;
  start(): void;
  /**
   * Stops claiming, then waits up to `timeoutMs` (0 to an hour, default 30 s) for batches in flight to be
   * delivered and settled; past it their deliveries are aborted and settled as failed attempts
   * (due again after their backoff), except messages the sink reports it never sent, whose
   * attempt is given back. Closes what the relay opened, never the sink.
   */
  stop(options?: { timeoutMs?: number }): Promise<void>;
  /** One claim, delivery and settle, as one turn of `start()`'s loop; for tests and scripts. */
  runOnce(): Promise<RelayPassResult>;
  /**
   * One bounded maintenance pass: retention, this relay's messages out of attempts, and one page
   * of parked messages looked over for stalled keys.
   */
  retainOnce(): Promise<RetentionResult>;
}

const defaultBackoff: BackoffOptions = { baseMs: 1_000, maxMs: 300_000, factor: 2, jitter: 0.5 };
/** Rows one retention statement deletes; a big backlog is worked off over several passes. */
const RETENTION_BATCH = 5_000;
/** Passes in a row a retention run makes before yielding to its interval. */
const RETENTION_ROUNDS = 20;
const MAX_RETRY_AFTER_MS = 3_600_000;
/** A delay goes to PostgreSQL as an int of ms: keep it whole and well inside 2^31. */
const MAX_DELAY_MS = 86_400_000;
/** After `stop()`'s timeout aborts the deliveries, this long for their settles before giving up. */
const STOP_GRACE_MS = 5_000;
/** After a batch's signal aborts, this long (at most a quarter of the lease) for the sink's answer. */
const ANSWER_GRACE_MS = 1_000;
/** Messages one maintenance statement sends to dead. */
const EXPIRE_BATCH = 1_000;

/**
 * Relays outbox messages to a sink: claims a batch under a lease (SKIP LOCKED, first message of
 * each key only), delivers it, and settles every message in one fenced statement. Several relays,
 * in one process or many, may run against one database.
 */
export function createRelay(options: RelayOptions): Relay {
  const logger = options.logger ?? createDefaultLogger('skiplock-outbox');
  const owned = resolvePool(options, logger, 'outbox-relay');
  const pool = owned.pool;
  const sink = checkSink(options.sink);
  const batchSize = positive('batchSize', options.batchSize ?? 100, 10_000);
  const lanes = positive('concurrency', options.concurrency ?? 2, 64);
  const leaseMs = positive('leaseMs', options.leaseMs ?? 30_000, 86_400_000);
  const maxAttempts = positive('maxAttempts', options.maxAttempts ?? 10, 1_000);
  const pollMs = positive('pollIntervalMs', options.pollIntervalMs ?? 1_000, 3_600_000);
  const retainMs = positive('retainDeliveredMs', options.retainDeliveredMs ?? 86_400_000, 2 ** 40);
  const maintenanceMs = positive(
    'retentionIntervalMs',
    options.retentionIntervalMs ?? 60_000,
    86_400_000,
  );
  const backoff = checkBackoff(options.backoff ?? defaultBackoff);
  const topics = options.topics ? [...options.topics] : null;
  if (topics && (topics.length === 0 || topics.some((t) => typeof t !== 'string' || !t))) {
    throw new TypeError(
      'createRelay: topics must be a non-empty list of topic names, or left out for all',
    );
  }
  const name = options.name ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  const asyncCommit = options.asyncCommit ?? true;
  const run = preparedRunner({
    enabled: options.preparedStatements ?? true,
    pool,
    logger,
    who: 'the outbox relay',
  });

  // Aborted by stop() once its grace period is over: deliveries in flight give up.
  const hardStop = new AbortController();
  const stopping = new AbortController();
  // Lanes asleep until a notification (or their poll) wakes them. A notification wakes one: one
  // publish is one message, and waking every lane for it cost 3 empty claims of 4 at 200
  // messages/s (p99 74 → 33 ms with one lane woken). A lane that claims a full batch wakes the
  // next, so a burst still gets every lane.
  const sleepers = new Set<() => void>();
  let wakeups = 0;
  const wakeOne = () => {
    for (const wake of sleepers) return wake();
  };
  const notified = () => {
    wakeups += 1;
    wakeOne();
  };

  // The sink's broker outage, shared by the lanes: batches in a row the sink failed as
  // `unavailable` (none of their messages delivered), and since when. Their messages keep their
  // attempts and wait out `computeBackoffMs(streak)`, and the lane that claimed them waits as long
  // before its next claim: at most one connect attempt per lane and delay, where claiming on
  // through a backlog tried one per batch (each failing at once on a refused connect).
  let outage: { since: number; batches: number; streak: number } | null = null;

  /** The delay for a batch with `unavailable` deliveries; opens or extends the outage. */
  function unavailableBatch(delivered: boolean, count: number, err: string): number {
    // At least the poll interval: a `backoff.baseMs` of 0 made the pause 0, and a relay claimed,
    // connected and settled against a down broker over a thousand times a second (found in
    // review), where before the messages' attempts ran out.
    const delay = (streak: number) => Math.max(wholeMs(computeBackoffMs(streak, backoff)), pollMs);
    if (delivered) return delay(1);
    if (!outage) {
      outage = { since: Date.now(), batches: 0, streak: 0 };
      // Once per outage, not per batch: a broker down for an hour is one line, not thousands.
      logger.warn(
        { reason: 'outbox_sink_unavailable', sink: sink.name, count, err },
        'the sink cannot reach its broker; messages wait for it without spending attempts',
      );
    }
    outage.batches += 1;
    outage.streak = Math.min(outage.streak + 1, 1_000);
    return delay(outage.streak);
  }

  /** A delivery went through: the outage, if any, is over. */
  function sinkDelivered(): void {
    if (!outage) return;
    logger.info(
      {
        reason: 'outbox_sink_recovered',
        sink: sink.name,
        durationMs: Date.now() - outage.since,
        batches: outage.batches,
      },
      'the sink reaches its broker again',
    );
    outage = null;
  }

  const runOnce = async (): Promise<RelayPassResult> => (await pass()).result;

  /** One claim, delivery and settle; `pauseMs` is how long the lane waits out an outage. */
  async function pass(): Promise<{ result: RelayPassResult; pauseMs: number }> {
    const result: RelayPassResult = {
      claimed: 0,
      delivered: 0,
      retried: 0,
      unavailable: 0,
      dead: 0,
      fenced: 0,
    };
    let pauseMs = 0;
    const leaseId = randomUUID();
    // The lease runs from the claim's start on the server: the batch's deadlines count from here.
    const claimSentAt = performance.now();
    const { rows } = await run<ClaimedRow>(
      pool,
      namedStatement(
        'skiplock_outbox_claim',
        claimMessages({
          limit: batchSize,
          leaseId,
          leaseMs,
          relay: name,
          topics,
          maxAttempts,
          asyncCommit,
        }),
      ),
    );
    if (rows.length === 0) return { result, pauseMs };
    rows.sort((a, b) => (BigInt(a.id) < BigInt(b.id) ? -1 : 1));
    result.claimed = rows.length;
    const messages = rows.map(toMessage);
    const deliveries = await deliver(messages, claimSentAt);
    const anyDelivered = deliveries.some((d) => d?.ok === true);
    if (anyDelivered) sinkDelivered();
    const down = deliveries.filter(
      (d): d is Extract<Delivery, { ok: false }> => d?.ok === false && d.unavailable === true,
    );
    const outageDelay =
      down.length > 0
        ? unavailableBatch(
            anyDelivered,
            down.length,
            storableText(String(down[0]!.error)).slice(0, 1_000),
          )
        : 0;
    if (down.length > 0 && !anyDelivered) pauseMs = outageDelay;
    const outcome = {
      ids: [] as string[],
      ok: [] as boolean[],
      dead: [] as boolean[],
      unsent: [] as boolean[],
      delayMs: [] as number[],
      errors: [] as (string | null)[],
    };
    for (const [i, message] of messages.entries()) {
      const delivery = deliveries[i] ?? { ok: false, error: 'the sink returned no result for it' };
      outcome.ids.push(message.id);
      outcome.ok.push(delivery.ok);
      if (delivery.ok) {
        outcome.dead.push(false);
        outcome.unsent.push(false);
        outcome.delayMs.push(0);
        outcome.errors.push(null);
        result.delivered += 1;
        continue;
      }
      if (delivery.unavailable === true) {
        // The broker's outage, not the message's fault: the attempt is given back, so an outage
        // of any length sends nothing dead (before, 10 attempts at the default backoff: about
        // nine minutes). Logged once per outage (outbox_sink_unavailable), not per message.
        outcome.dead.push(false);
        outcome.unsent.push(true);
        outcome.delayMs.push(outageDelay);
        outcome.errors.push(
          `sink unavailable, attempt not counted: ${storableText(String(delivery.error))}`.slice(
            0,
            1_000,
          ),
        );
        result.retried += 1;
        result.unavailable += 1;
        continue;
      }
      if (delivery.notSent === true) {
        // Never sent: the attempt is given back and the message is due again at once.
        outcome.dead.push(false);
        outcome.unsent.push(true);
        outcome.delayMs.push(0);
        outcome.errors.push(storableText(String(delivery.error)).slice(0, 1_000));
        result.retried += 1;
        continue;
      }
      const dead = delivery.permanent === true || message.attempt >= maxAttempts;
      const delay = wholeMs(
        Math.max(
          computeBackoffMs(message.attempt, backoff),
          Math.min(wholeMs(delivery.retryAfterMs), MAX_RETRY_AFTER_MS),
        ),
      );
      outcome.dead.push(dead);
      outcome.unsent.push(false);
      outcome.delayMs.push(dead ? 0 : delay);
      // The receiver's words go to last_error for operators, never to the log.
      // Stored as text, which holds no NUL: a receiver's body with one failed the batch's settle.
      const error = storableText(String(delivery.error)).slice(0, 1_000);
      const detail =
        typeof delivery.detail === 'string' && delivery.detail
          ? `: ${storableText(delivery.detail).slice(0, 500)}`
          : '';
      outcome.errors.push(error + detail);
      const fields = {
        id: message.id,
        topic: message.topic,
        attempt: message.attempt,
        sink: sink.name,
        err: error,
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
    const settle =
      result.delivered === rows.length
        ? namedStatement(
            'skiplock_outbox_delivered',
            settleDelivered(leaseId, asyncCommit, outcome.ids),
          )
        : namedStatement('skiplock_outbox_settle', settleMessages(leaseId, asyncCommit, outcome));
    const settled = await settleBatch(settle, rows.length, claimSentAt);
    result.fenced = rows.length - settled.count;
    if (result.fenced > 0) {
      logger.warn(
        { reason: 'outbox_lease_lost', count: result.fenced, sink: sink.name },
        settled.repeated
          ? 'a settle tried again matched fewer messages: the failed one may have committed, or the lease ran out'
          : 'lease ran out before the settle; another relay took the messages',
      );
    }
    return { result, pauseMs };
  }

  /**
   * Writes the batch's settle, again after a failed write (a reset connection, a failover) until
   * the lease would have run out or the relay stops hard. Given up at the first failure, a batch
   * stayed leased: maintenance then sent a delivered message on its last attempt dead as never
   * settled, an unavailable broker's messages kept the attempt they should have got back, and
   * the next claim delivered the whole batch again (found by an audit). Fenced by the lease id,
   * which the first settle to commit clears: a repeat of one that committed, its answer lost,
   * matches nothing.
   */
  async function settleBatch(
    statement: Statement,
    count: number,
    claimSentAt: number,
  ): Promise<{ count: number; repeated: boolean }> {
    for (let failures = 1; ; failures++) {
      try {
        const { rows } = await run<{ settled: number }>(pool, statement);
        return { count: rows[0]?.settled ?? 0, repeated: failures > 1 };
      } catch (error) {
        const delay = retryDelayMs(failures, 1_000);
        if (hardStop.signal.aborted || performance.now() + delay >= claimSentAt + leaseMs) {
          throw error;
        }
        logger.warn(
          { reason: 'outbox_settle_retry', count, failures, err: errorMessage(error) },
          'settle failed; trying again',
        );
        await sleep(delay, hardStop.signal);
      }
    }
  }

  /** The sink's deliveries, or every message failed when the sink throws or misbehaves. */
  async function deliver(messages: OutboxMessage[], claimSentAt: number): Promise<Delivery[]> {
    // One controller per batch, fed by the stop and a timer. Not AbortSignal.any() on the
    // relay-long stop signal: on Node 20 every call adds a dependant that is never dropped.
    const batch = new AbortController();
    const abort = () => batch.abort(new Error('the batch deadline passed or the relay stopped'));
    // Half the lease from the claim's start, not from its answer: a slow claim (a lagging
    // synchronous standby, a pool wait) ate into the time left to settle (found by an audit).
    const timer = setTimeout(
      abort,
      Math.max(1, Math.floor(leaseMs / 2 - (performance.now() - claimSentAt))),
    );
    hardStop.signal.addEventListener('abort', abort, { once: true });
    if (hardStop.signal.aborted) abort();
    // A sink that ignores its signal must not hold the relay past the deadline. One that heeds it
    // answers at once, saying which messages it never sent (`notSent`: their attempt is given
    // back), so the relay waits a little more for that answer (`ANSWER_GRACE_MS`, at most a
    // quarter of the lease: still settled before the lease runs out). Failing the batch as the
    // signal fired threw those answers away, and every message of it counted an attempt, unsent
    // ones too (a batch of 3 to a slow webhook receiver with `maxAttempts: 1`: all 3 dead, 1 sent).
    let grace: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      const fail = () => {
        grace = setTimeout(
          () => reject(new Error(`sink ${sink.name} did not return by the batch deadline`)),
          Math.max(1, Math.min(ANSWER_GRACE_MS, Math.floor(leaseMs / 4))),
        );
      };
      if (batch.signal.aborted) fail();
      else batch.signal.addEventListener('abort', fail, { once: true });
    });
    deadline.catch(() => {});
    try {
      const deliveries = await Promise.race([sink.deliver(messages, batch.signal), deadline]);
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
    } finally {
      clearTimeout(timer);
      clearTimeout(grace);
      hardStop.signal.removeEventListener('abort', abort);
    }
  }

  /** Where the next look for stalled keys starts: the last parked id the previous one read. */
  let unstallAfter = '0';
  const retention = new IntervalService<RetentionResult>(
    'outbox-retention',
    maintenanceMs,
    async () => {
      const { rows: expiredRows } = await runSql<{ id: string; lease_ran_out: boolean }>(
        pool,
        expireLastAttempts(maxAttempts, EXPIRE_BATCH, topics),
      );
      for (const { id, lease_ran_out } of expiredRows) {
        if (lease_ran_out) {
          logger.error(
            { reason: 'outbox_dead_lease', id, sink: sink.name },
            'outbox message dead: its last attempt never settled',
          );
        } else {
          logger.error(
            { reason: 'outbox_dead_attempts', id, sink: sink.name, maxAttempts },
            'outbox message dead: out of attempts under this relay',
          );
        }
      }
      const { rows: swept } = await runSql<{
        last: string | null;
        read: number;
        unstalled: number;
      }>(pool, unparkStalledKeys(unstallAfter, UNSTALL_PAGE));
      const page = swept[0];
      // The next pass reads the next page; after a short one it starts over.
      unstallAfter = page && page.read === UNSTALL_PAGE && page.last ? page.last : '0';
      const unstalled = page?.unstalled ?? 0;
      if (unstalled > 0) {
        logger.warn(
          { reason: 'outbox_key_unstalled', keys: unstalled },
          'keys held back behind parked messages with nothing before them; their next message is due again',
        );
      }
      let deleted = 0;
      for (let round = 0; round < RETENTION_ROUNDS && !stopping.signal.aborted; round++) {
        const { rowCount } = await runSql(pool, deleteDelivered(retainMs, RETENTION_BATCH));
        deleted += rowCount;
        if (rowCount < RETENTION_BATCH) break;
      }
      if (deleted > 0) {
        logger.info({ reason: 'outbox_retention', deleted }, 'deleted delivered messages');
      }
      return { deleted, expired: expiredRows.length, unstalled };
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
      let pauseMs: number;
      try {
        ({ result, pauseMs } = await pass());
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
      if (pauseMs > 0) {
        // The sink's broker is down: claiming on would only fail the next batch against it.
        await sleep(pauseMs, stopping.signal);
        continue;
      }
      if (result.claimed === batchSize) wakeOne();
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
  let stopped: Promise<void> | null = null;
  return {
    name,
    start() {
      if (running) return;
      listener?.start();
      retention.start();
      // In the root context, so a sink's own spans (an HTTP client's) are not children of the
      // span active at start().
      running = Array.from({ length: lanes }, () => detached(lane));
      logger.info(
        { reason: 'outbox_relay_started', relay: name, sink: sink.name, lanes, batchSize },
        'outbox relay started',
      );
    },
    stop({ timeoutMs = 30_000 } = {}) {
      // Node fires a timer of more than 2^31-1 ms after 1 ms: Infinity aborted deliveries at once.
      if (!Number.isInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > 3_600_000) {
        return Promise.reject(
          new TypeError(
            `relay.stop: timeoutMs must be an integer from 0 to 3600000, got ${String(timeoutMs)}`,
          ),
        );
      }
      // Once: a second call waits for the first (ending the listener's client twice would hang).
      stopped ??= stopOnce(timeoutMs);
      return stopped;
    },
    runOnce,
    retainOnce: () => retention.runOnce(),
  };

  async function stopOnce(timeoutMs: number): Promise<void> {
    stopping.abort();
    const timer = setTimeout(() => hardStop.abort(), timeoutMs);
    // Bounded: a claim or settle stuck on a lock or a dead network must not hold stop() for
    // good. Lanes still in a statement then finish (or fail) on their own.
    let giveUp: NodeJS.Timeout | undefined;
    const done = await Promise.race([
      Promise.all([...(running ?? []), listener?.stop(), retention.stop()]).then(() => true),
      new Promise<false>(
        (resolve) => (giveUp = setTimeout(() => resolve(false), timeoutMs + STOP_GRACE_MS)),
      ),
    ]);
    clearTimeout(timer);
    clearTimeout(giveUp);
    if (!done) {
      logger.warn(
        { reason: 'outbox_stop_timeout', relay: name, timeoutMs },
        'relay stopped before its last statements returned',
      );
      void owned.release().catch(() => {});
    } else {
      await owned.release();
    }
    logger.info({ reason: 'outbox_relay_stopped', relay: name }, 'outbox relay stopped');
  }
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

/** A delay in whole ms within what PostgreSQL's int takes; garbage counts as none. */
function wholeMs(value: number | undefined): number {
  if (value === undefined || !Number.isFinite(value) || value <= 0) return 0;
  return Math.min(MAX_DELAY_MS, Math.round(value));
}

/**
 * Checked before any claim: a sink without `deliver` (a sink factory's options given in its
 * place, say) failed every batch it was handed, and each failure spent an attempt of every
 * message in it, until they went dead (found by an audit).
 */
function checkSink(sink: Sink): Sink {
  const given = sink as Partial<Sink> | null | undefined;
  if (
    typeof given !== 'object' ||
    given === null ||
    typeof given.name !== 'string' ||
    typeof given.deliver !== 'function'
  ) {
    throw new TypeError(
      'createRelay: sink must be a sink object with a name and deliver(messages, signal), ' +
        'such as natsSink(...), rabbitmqSink(...) or webhookSink(...)',
    );
  }
  return sink;
}

function checkBackoff(backoff: BackoffOptions): BackoffOptions {
  const { baseMs, maxMs, factor, jitter } = backoff ?? ({} as BackoffOptions);
  const bad = (field: string, rule: string) =>
    new TypeError(`createRelay: backoff.${field} must be ${rule}`);
  if (!Number.isFinite(baseMs) || baseMs < 0) throw bad('baseMs', 'a number of ms ≥ 0');
  if (!Number.isFinite(maxMs) || maxMs < baseMs || maxMs > MAX_DELAY_MS) {
    throw bad('maxMs', `a number of ms from baseMs to ${MAX_DELAY_MS}`);
  }
  if (!Number.isFinite(factor) || factor < 1) throw bad('factor', 'a number ≥ 1');
  if (!Number.isFinite(jitter) || jitter < 0 || jitter > 1) throw bad('jitter', 'from 0 to 1');
  return backoff;
}

function positive(option: string, value: number, max: number): number {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new TypeError(
      `createRelay: ${option} must be an integer from 1 to ${max}, got ${String(value)}`,
    );
  }
  return value;
}
