import { createRetention, createSweeper } from '@skiplock/queue';
import { createSagaRuntime, defineSaga } from '@skiplock/saga';
import pg from 'pg';
import { pino } from 'pino';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { useTestDatabase } from './support/db.js';
import { waitFor } from './support/wait.js';

const db = await useTestDatabase();
const silent = pino({ level: 'silent' });

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
function heapAfterGc(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

/**
 * Abort listeners currently attached, per signal, counted from every add and remove. A `once`
 * listener leaves only when its signal aborts, which none does while a service runs.
 */
function watchAbortListeners() {
  const live = new Map<AbortSignal, number>();
  const add = EventTarget.prototype.addEventListener;
  const remove = EventTarget.prototype.removeEventListener;
  const added = vi.spyOn(EventTarget.prototype, 'addEventListener').mockImplementation(function (
    this: EventTarget,
    type,
    listener,
    options,
  ) {
    if (this instanceof AbortSignal && type === 'abort') live.set(this, (live.get(this) ?? 0) + 1);
    return add.call(this, type, listener, options);
  });
  const removed = vi
    .spyOn(EventTarget.prototype, 'removeEventListener')
    .mockImplementation(function (this: EventTarget, type, listener, options) {
      if (this instanceof AbortSignal && type === 'abort')
        live.set(this, (live.get(this) ?? 1) - 1);
      return remove.call(this, type, listener, options);
    });
  return {
    most: () => Math.max(0, ...live.values()),
    restore() {
      added.mockRestore();
      removed.mockRestore();
    },
  };
}

interface Service {
  start(): void;
  stop(): Promise<void>;
}

let watch: ReturnType<typeof watchAbortListeners> | null = null;
afterEach(() => watch?.restore());

/**
 * Runs `service` on its shortest interval for `ms`, and on until `enough()` holds if given (a
 * loaded machine runs fewer passes in the time); returns the most listeners any signal held.
 */
async function runFor(service: Service, ms: number, enough?: () => boolean) {
  watch = watchAbortListeners();
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.name);
  process.on('warning', onWarning);
  try {
    service.start();
    await new Promise((r) => setTimeout(r, ms));
    if (enough) await waitFor(enough, { timeoutMs: 30_000, what: 'enough passes' });
    const most = watch.most();
    await service.stop();
    return { most, warnings };
  } finally {
    process.off('warning', onWarning);
    watch.restore();
    watch = null;
  }
}

describe('background services run many passes with flat listeners and heap', () => {
  it('the saga reconciler: hundreds of passes at 10 ms, one abort listener, no warning', async () => {
    const saga = defineSaga({ name: 'flat', version: 1, input: z.object({}) }).step('a', {
      run: () => 1,
    });
    // A pool of the test's own, so each pass (one transaction, one checkout) can be counted.
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    let passes = 0;
    pool.on('acquire', () => (passes += 1));
    const newRuntime = () =>
      createSagaRuntime({ pool, sagas: [saga], logger: silent, reconciler: { intervalMs: 10 } });
    // A warm-up runtime first: the pool's connections, their prepared statements and the code's
    // first compilation are paid once, not counted as growth (without it the growth came to
    // 1,057,400 bytes in one CI run, over the bound, with no listener kept).
    const warm = newRuntime();
    await runFor(warm.reconciler, 300);
    await warm.close();
    passes = 0;
    const runtime = newRuntime();
    const before = heapAfterGc();
    const { most, warnings } = await runFor(runtime.reconciler, 2_000, () => passes > 50);
    const grown = heapAfterGc() - before;
    await runtime.close();
    await pool.end();
    expect(passes).toBeGreaterThan(50);
    expect(most).toBeLessThanOrEqual(1);
    expect(warnings).not.toContain('MaxListenersExceededWarning');
    // The loop this replaces kept one listener per pass, about 500 bytes each; flat stays far
    // below 1 MiB however many passes ran.
    expect(grown).toBeLessThan(1024 * 1024);
  });

  it('the sweeper and retention: passes at 100 ms hold one abort listener each', async () => {
    for (const service of [
      createSweeper({ pool: db.pool, logger: silent, intervalMs: 100 }),
      createRetention({ pool: db.pool, logger: silent, intervalMs: 100 }),
    ]) {
      const { most, warnings } = await runFor(service, 1_000);
      expect(most).toBeLessThanOrEqual(1);
      expect(warnings).toEqual([]);
    }
  });
});
