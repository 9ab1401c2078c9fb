/** Resolves after `ms`, or at once when `signal` aborts; never rejects. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** `ms` spread by ±`spread` (0..1) so that many processes on one interval drift apart. */
export function withJitter(ms: number, spread = 0.25, random: () => number = Math.random): number {
  return Math.max(0, Math.round(ms * (1 - spread + 2 * spread * random())));
}

/** Capped exponential delay for reconnects and failed database calls: 100 ms, 200 ms, … maxMs. */
export function retryDelayMs(failures: number, maxMs = 5_000): number {
  return withJitter(Math.min(maxMs, 100 * 2 ** Math.min(failures, 16)), 0.5);
}
