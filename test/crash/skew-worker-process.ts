/**
 * A saga worker process whose host clock is off by SKEW_MS (what an unsynchronised NTP client
 * leaves): Date.now() of this process only; the database's clock is untouched.
 */
import { napSaga } from './skew-saga.js';
import { startSagaWorker } from './saga-worker.js';

const skew = Number(process.env.SKEW_MS ?? '0');
const realNow = Date.now.bind(Date);
Date.now = () => realNow() + skew;

const url = process.env.DATABASE_URL;
const workerId = process.env.SAGA_WORKER_ID;
if (!url || !workerId) throw new Error('skew-worker-process: set DATABASE_URL and SAGA_WORKER_ID');
await startSagaWorker({ url, workerId, sagas: () => [napSaga] });
