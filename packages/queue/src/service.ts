import type { Logger } from './logger.js';
import { retryDelayMs, sleep, withJitter } from './timers.js';
import { detached } from './tracing.js';

/**
 * The shape of every maintenance service: `runOnce()` does one bounded pass and returns what it
 * did (tests call it directly); `start()` runs it on a jittered interval until `stop()`.
 */
export class IntervalService<R> {
  private readonly stopper = new AbortController();
  private loop: Promise<void> | null = null;

  constructor(
    private readonly name: string,
    private readonly intervalMs: number,
    private readonly pass: () => Promise<R>,
    private readonly logger: Logger,
  ) {}

  runOnce(): Promise<R> {
    return this.pass();
  }

  start(): void {
    this.loop ??= detached(() => this.run());
  }

  async stop(): Promise<void> {
    this.stopper.abort();
    await this.loop;
  }

  private async run(): Promise<void> {
    let failures = 0;
    // Start at a random point of the interval so hosts started together do not sweep together.
    await sleep(withJitter(this.intervalMs / 2, 1), this.stopper.signal);
    while (!this.stopper.signal.aborted) {
      try {
        await this.pass();
        failures = 0;
        await sleep(withJitter(this.intervalMs, 0.2), this.stopper.signal);
      } catch (error) {
        failures += 1;
        this.logger.warn(
          { reason: 'db_error', service: this.name, err: String(error) },
          'pass failed',
        );
        await sleep(Math.max(retryDelayMs(failures, this.intervalMs), 100), this.stopper.signal);
      }
    }
  }
}
