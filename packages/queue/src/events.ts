import { EventEmitter } from 'node:events';
import type { Logger } from './logger.js';

export interface JobEvent {
  jobId: string;
  jobType: string;
  queue: string;
  attempt: number;
}

/** A job's attempt lost its lock; `current` says which write won (see the queue README). */
export interface LockLostEvent extends JobEvent {
  /**
   * The job as it is now (`holder`: the worker running it, when `processing`); null when the row
   * is gone, undefined when it could not be read.
   */
  current: { status: string; attempt: number; holder: string | null } | null | undefined;
}

/** Lifecycle events, `noun:verb`. Listeners are for observation; they cannot break the worker. */
export interface WorkerEvents {
  'job:claimed': [JobEvent];
  'job:completed': [JobEvent & { durationMs: number }];
  'job:retry': [JobEvent & { reason: string; delayMs: number }];
  'job:dead': [JobEvent & { reason: string }];
  'job:lock_lost': [LockLostEvent];
  'job:released': [JobEvent];
  'worker:error': [{ reason: string; error: unknown }];
  'worker:idle': [];
}

export class SafeEmitter<E extends { [K in keyof E]: unknown[] }> {
  private readonly emitter = new EventEmitter();

  constructor(private readonly logger: Logger) {
    this.emitter.setMaxListeners(100);
  }

  on<K extends keyof E & string>(event: K, listener: (...args: E[K]) => void): () => void {
    const wrapped = listener as (...args: unknown[]) => void;
    this.emitter.on(event, wrapped);
    return () => this.emitter.off(event, wrapped);
  }

  once<K extends keyof E & string>(event: K): Promise<E[K]> {
    return new Promise((resolve) => this.emitter.once(event, (...args) => resolve(args as E[K])));
  }

  /** Whether anyone listens: lets a hot path skip building an event nobody reads. */
  listening(event: keyof E & string): boolean {
    return this.emitter.listenerCount(event) > 0;
  }

  emit<K extends keyof E & string>(event: K, ...args: E[K]): void {
    if (this.emitter.listenerCount(event) === 0) return;
    for (const listener of this.emitter.listeners(event)) {
      try {
        (listener as (...a: unknown[]) => void)(...args);
      } catch (error) {
        this.logger.warn(
          { reason: 'listener_error', event, err: String(error) },
          'event listener threw',
        );
      }
    }
  }
}
