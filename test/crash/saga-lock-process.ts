/**
 * One process of the lock-key test (saga-lock-key.test.ts): a saga worker and reconciler for
 * `account_lock`, and, at the moment START_AT (epoch ms, the same for every process), a burst of
 * SAGAS starts over KEYS accounts, all at once on its own connections, so starts with one key
 * from several processes meet in PostgreSQL (see saga-worker.ts for the worker). Logs `started`
 * when up and `starts_done` after the burst.
 */
import { lockedSaga } from './saga-lock.js';
import { startSagaWorker } from './saga-worker.js';

const url = process.env.DATABASE_URL;
const name = process.env.PROC;
const sagas = Number(process.env.SAGAS);
const keys = Number(process.env.KEYS);
const startAt = Number(process.env.START_AT);
if (!url || !name || !sagas || !keys || !startAt) {
  throw new Error('saga-lock-process: set DATABASE_URL, PROC, SAGAS, KEYS and START_AT');
}
const { runtime } = await startSagaWorker({
  url,
  workerId: name,
  sagas: () => [lockedSaga],
  concurrency: 6,
  pollIntervalMs: 50,
});
await new Promise((resolve) => setTimeout(resolve, Math.max(0, startAt - Date.now())));
await Promise.all(
  Array.from({ length: sagas }, (_, i) =>
    runtime.start(lockedSaga, {
      id: `${name}-${i}`,
      input: { account: `acct-${i % keys}`, fail: i % 7 === 3 },
    }),
  ),
);
console.log(JSON.stringify({ reason: 'starts_done' }));
