import pg from 'pg';
import type { Logger } from './logger.js';
import { retryDelayMs, sleep } from './timers.js';
import { detached } from './tracing.js';

export const NOTIFY_CHANNEL = 'skiplock_jobs';
/** Inserts of jobs waiting for a concurrency slot notify their key here (`*`: many keys). */
export const ADMIT_CHANNEL = 'skiplock_admit';
/** An operator's stop of a running job names the job's worker here (see `cancelJob`). */
export const STOP_CHANNEL = 'skiplock_stop';

export interface ListenerOptions {
  /** Connection settings of the pool; the listener opens one connection of its own. */
  connection: pg.ClientConfig;
  onNotify: (queue: string) => void;
  onAdmit?: ((key: string) => void) | undefined;
  /** A job of the worker this names was stopped (`*`: the connection was down, maybe missed). */
  onStop?: ((workerId: string) => void) | undefined;
  /**
   * Channels to LISTEN on; notifications on any but the admission and stop channels go to
   * `onNotify`.
   */
  channels?: readonly string[] | undefined;
  logger: Logger;
  /** Reconnect attempts in a row before giving up on LISTEN (polling carries on). */
  maxReconnectAttempts?: number | undefined;
  /**
   * Run once on each new connection after LISTEN, for the other statements the worker sends on it
   * (its claims, see `claimClient`); a failure is logged and the connection kept.
   */
  sessionSql?: string | undefined;
}

/**
 * Holds one LISTEN connection per worker, on which the worker also claims (`claimClient`). When it
 * drops (database restart, terminated backend), it reconnects with capped, jittered backoff;
 * meanwhile, and for good after too many failures, the worker polls and claims on its pool, so a
 * lost listener only costs latency.
 */
export class Listener {
  private client: pg.Client | null = null;
  private readonly stopper = new AbortController();
  private loop: Promise<void> | null = null;
  private connected = false;
  private gaveUp = false;
  private readonly waiters = new Set<() => void>();
  reconnects = 0;

  constructor(private readonly options: ListenerOptions) {}

  /** `work`, or a rejection once stop() is called; leaves no handler behind either way. */
  private async untilStopped<T>(work: Promise<T>): Promise<T> {
    const signal = this.stopper.signal;
    let onAbort = () => {};
    const stopped = new Promise<never>((_resolve, reject) => {
      onAbort = () => reject(new Error('listener stopped'));
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    });
    try {
      return await Promise.race([work, stopped]);
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }

  get isListening(): boolean {
    return this.connected;
  }

  /**
   * The connection while it is up and listening, for the worker's claims: a claim sent here needs
   * no pool checkout, and `sessionSql` has set the connection up for it.
   */
  get claimClient(): pg.Client | null {
    return this.connected ? this.client : null;
  }

  start(): void {
    this.loop ??= detached(() => this.run());
  }

  /**
   * Starts listening if it has not, and waits up to `ms` for the connection; says if it is up. The
   * wait ends early when an attempt fails (the next comes after a backoff), when the listener gave
   * up and on stop(): the caller then goes on without it rather than wait for nothing.
   */
  async ready(ms: number): Promise<boolean> {
    this.start();
    if (this.connected || this.ended) return this.connected;
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waiters.add(done);
    });
    return this.connected;
  }

  async stop(): Promise<void> {
    this.stopper.abort();
    this.wakeWaiters();
    await this.client?.end().catch(() => {});
    await this.loop;
  }

  /** True once the loop will not connect again (stopped, or gave up). */
  private get ended(): boolean {
    return this.stopper.signal.aborted || this.gaveUp;
  }

  private wakeWaiters(): void {
    for (const waiter of [...this.waiters]) waiter();
  }

  private async run(): Promise<void> {
    const max = this.options.maxReconnectAttempts ?? 100;
    let failures = 0;
    while (!this.stopper.signal.aborted) {
      const closed = await this.connectOnce();
      // Whoever waits in ready() goes on without the connection until the next attempt.
      this.wakeWaiters();
      if (this.stopper.signal.aborted) break;
      if (closed === 'connected-then-dropped') failures = 0;
      failures += 1;
      if (failures > max) {
        this.options.logger.error(
          { reason: 'listen_gave_up', attempts: failures - 1 },
          'LISTEN connection keeps failing; relying on polling only',
        );
        this.gaveUp = true;
        return;
      }
      const delay = retryDelayMs(failures, 30_000);
      this.options.logger.warn(
        { reason: 'listen_reconnect', delayMs: delay },
        'LISTEN connection lost',
      );
      this.reconnects += 1;
      await sleep(delay, this.stopper.signal);
    }
  }

  /** Connects and listens until the connection ends; says whether it had been up. */
  private async connectOnce(): Promise<'failed' | 'connected-then-dropped'> {
    const client = new pg.Client({
      ...this.options.connection,
      application_name: 'skiplock-listener',
    });
    this.client = client;
    let ended!: () => void;
    const done = new Promise<void>((resolve) => (ended = resolve));
    // Not connected from the moment it fails, so no claim is sent on a client already gone.
    client.on('error', (error) => {
      this.connected = false;
      this.options.logger.debug({ reason: 'listen_error', err: error.message }, 'listener error');
      ended();
    });
    client.on('end', () => {
      this.connected = false;
      ended();
    });
    client.on('notification', (msg) => {
      if (msg.channel === ADMIT_CHANNEL) this.options.onAdmit?.(msg.payload ?? '*');
      else if (msg.channel === STOP_CHANNEL) this.options.onStop?.(msg.payload ?? '*');
      else this.options.onNotify(msg.payload ?? '');
    });
    try {
      // node-postgres never settles connect() on a client ended while it connects (stop() during
      // an attempt a server has not answered yet), so the wait also ends on stop().
      await this.untilStopped(client.connect());
      const channels = this.options.channels ?? [NOTIFY_CHANNEL, ADMIT_CHANNEL, STOP_CHANNEL];
      await client.query(channels.map((channel) => `LISTEN ${channel}`).join('; '));
      if (this.options.sessionSql) {
        await client.query(this.options.sessionSql).catch((error: unknown) => {
          this.options.logger.warn(
            { reason: 'listen_session_setting', err: String(error) },
            'the LISTEN connection kept its defaults for claims',
          );
        });
      }
    } catch (error) {
      this.options.logger.debug({ reason: 'listen_error', err: String(error) }, 'listen failed');
      await client.end().catch(() => {});
      return 'failed';
    }
    // stop() may have ended this client before it finished connecting; do not listen on.
    if (this.stopper.signal.aborted) {
      await client.end().catch(() => {});
      return 'connected-then-dropped';
    }
    this.connected = true;
    this.wakeWaiters();
    // Work, or a stop, may have arrived while we were not listening.
    this.options.onNotify('*');
    this.options.onAdmit?.('*');
    this.options.onStop?.('*');
    const onStop = () => void client.end().catch(() => {});
    this.stopper.signal.addEventListener('abort', onStop, { once: true });
    await done;
    this.stopper.signal.removeEventListener('abort', onStop);
    this.connected = false;
    await client.end().catch(() => {});
    return 'connected-then-dropped';
  }
}
