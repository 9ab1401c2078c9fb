import pg from 'pg';
import type { Logger } from './logger.js';
import { retryDelayMs, sleep } from './timers.js';

export const NOTIFY_CHANNEL = 'skiplock_jobs';
/** Inserts of jobs waiting for a concurrency slot notify their key here (`*`: many keys). */
export const ADMIT_CHANNEL = 'skiplock_admit';

export interface ListenerOptions {
  /** Connection settings of the pool; the listener opens one connection of its own. */
  connection: pg.ClientConfig;
  onNotify: (queue: string) => void;
  onAdmit?: ((key: string) => void) | undefined;
  /** Channels to LISTEN on; notifications on any but the admission channel go to `onNotify`. */
  channels?: readonly string[] | undefined;
  logger: Logger;
  /** Reconnect attempts in a row before giving up on LISTEN (polling carries on). */
  maxReconnectAttempts?: number | undefined;
}

/**
 * Holds one LISTEN connection per worker. When it drops (database restart, terminated backend),
 * it reconnects with capped, jittered backoff; meanwhile, and for good after too many failures,
 * the worker's polling keeps claims going, so a lost listener only costs latency.
 */
export class Listener {
  private client: pg.Client | null = null;
  private readonly stopper = new AbortController();
  private loop: Promise<void> | null = null;
  private connected = false;
  reconnects = 0;

  constructor(private readonly options: ListenerOptions) {}

  get isListening(): boolean {
    return this.connected;
  }

  start(): void {
    this.loop ??= this.run();
  }

  async stop(): Promise<void> {
    this.stopper.abort();
    await this.client?.end().catch(() => {});
    await this.loop;
  }

  private async run(): Promise<void> {
    const max = this.options.maxReconnectAttempts ?? 100;
    let failures = 0;
    while (!this.stopper.signal.aborted) {
      const closed = await this.connectOnce();
      if (this.stopper.signal.aborted) break;
      if (closed === 'connected-then-dropped') failures = 0;
      failures += 1;
      if (failures > max) {
        this.options.logger.error(
          { reason: 'listen_gave_up', attempts: failures - 1 },
          'LISTEN connection keeps failing; relying on polling only',
        );
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
    client.on('error', (error) => {
      this.options.logger.debug({ reason: 'listen_error', err: error.message }, 'listener error');
      ended();
    });
    client.on('end', () => ended());
    client.on('notification', (msg) => {
      if (msg.channel === ADMIT_CHANNEL) this.options.onAdmit?.(msg.payload ?? '*');
      else this.options.onNotify(msg.payload ?? '');
    });
    try {
      await client.connect();
      const channels = this.options.channels ?? [NOTIFY_CHANNEL, ADMIT_CHANNEL];
      await client.query(channels.map((channel) => `LISTEN ${channel}`).join('; '));
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
    // Work may have arrived while we were not listening.
    this.options.onNotify('*');
    this.options.onAdmit?.('*');
    const onStop = () => void client.end().catch(() => {});
    this.stopper.signal.addEventListener('abort', onStop, { once: true });
    await done;
    this.stopper.signal.removeEventListener('abort', onStop);
    this.connected = false;
    await client.end().catch(() => {});
    return 'connected-then-dropped';
  }
}
