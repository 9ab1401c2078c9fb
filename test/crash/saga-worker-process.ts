/**
 * A saga worker as a real OS process, for the saga SIGKILL tests (see saga-worker.ts): runs the
 * `transfer` saga (saga-sigkill.test.ts) or, with SAGA_SET=tree, `order_tree` and its child
 * `parcel` (saga-shapes.test.ts). Configured by DATABASE_URL and SAGA_WORKER_ID.
 */
import { createTransferSaga } from './saga-transfer.js';
import { createTreeSagas } from './saga-tree.js';
import { startSagaWorker } from './saga-worker.js';

const url = process.env.DATABASE_URL;
const workerId = process.env.SAGA_WORKER_ID;
if (!url || !workerId) throw new Error('saga-worker-process: set DATABASE_URL and SAGA_WORKER_ID');
await startSagaWorker({
  url,
  workerId,
  sagas: (pool) =>
    process.env.SAGA_SET === 'tree' ? [createTreeSagas(pool).order] : [createTransferSaga(pool)],
});
