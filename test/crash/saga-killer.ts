import { setTimeout as delay } from 'node:timers/promises';
import { spawnNode, type ChildHandle } from '../support/processes.js';
import { waitFor } from '../support/wait.js';

export interface SagaKillerOptions {
  /** The bundled worker script (see bundleForNode); started with DATABASE_URL and SAGA_WORKER_ID. */
  script: string;
  url: string;
  /** More environment for each worker process. */
  env?: Record<string, string>;
  workers: number;
  /** The killer stops after this many, so a run that cannot finish fails instead of looping. */
  maxKills: number;
  /** Resolves true once the work is done; polled while the workers are being killed. */
  done: () => Promise<boolean>;
  what: string;
  timeoutMs?: number;
}

/**
 * Runs saga worker processes and SIGKILLs a random one every 0.6-1 s (starting a replacement each
 * time) until `done` holds, then stops them all with SIGTERM. Throws if a worker died of anything
 * but a kill, or the work did not finish in time; returns how many were killed.
 */
export async function runUnderKills(options: SagaKillerOptions): Promise<number> {
  const killed = new Set<string>();
  const unexpectedExits: string[] = [];
  const workers: ChildHandle[] = [];
  const all: ChildHandle[] = [];
  let launched = 0;
  const launch = async () => {
    const name = `saga-w${++launched}`;
    const handle = spawnNode(name, options.script, {
      ...options.env,
      DATABASE_URL: options.url,
      SAGA_WORKER_ID: name,
    });
    void handle.exited.then(({ code, signal }) => {
      if (!killed.has(name) && signal !== 'SIGTERM' && code !== 0) {
        unexpectedExits.push(`${name} exited ${code ?? signal}: ${handle.stderrTail()}`);
      }
    });
    all.push(handle);
    await handle.waitForLine((l) => l.reason === 'started', 60_000);
    // Only a worker that is up is a candidate for the next kill.
    workers.push(handle);
  };
  await Promise.all(Array.from({ length: options.workers }, launch));

  let allDone = false;
  const driver = (async () => {
    while (!allDone && killed.size < options.maxKills) {
      await delay(600 + Math.random() * 400);
      const alive = workers.filter((w) => !w.hasExited && !killed.has(w.name));
      const victim = alive[Math.floor(Math.random() * alive.length)];
      if (allDone || !victim) continue;
      killed.add(victim.name);
      victim.kill('SIGKILL');
      await victim.exited;
      launch().catch((error: unknown) => unexpectedExits.push(String(error)));
    }
  })();
  try {
    await waitFor(
      async () => {
        if (unexpectedExits.length > 0) throw new Error(unexpectedExits.join('\n'));
        return options.done();
      },
      { timeoutMs: options.timeoutMs ?? 50_000, intervalMs: 200, what: options.what },
    );
  } finally {
    allDone = true;
    await driver;
    for (const w of all) w.kill('SIGTERM');
    await Promise.all(all.map((w) => w.exited));
  }
  return killed.size;
}
