import { DBOS } from '@dbos-inc/dbos-sdk';
import pg from 'pg';
import {
  BRANCHES,
  cancelInvoice,
  charge,
  createInvoice,
  prepare,
  sendReceipt,
  unprepare,
  type BillingInput,
} from './billing.js';
import type { SagaShapeId, SagaSystem } from './types.js';

let pool: pg.Pool | null = null;
const db = () => pool!;

/**
 * DBOS's saga: a durable workflow whose steps are checkpointed in its system tables (in the same
 * database), with the compensation in a catch, as DBOS documents it.
 */
async function billingWorkflow(input: BillingInput): Promise<string> {
  await DBOS.runStep(() => createInvoice(db(), input), { name: 'createInvoice' });
  try {
    await DBOS.runStep(() => charge(db(), input), { name: 'charge' });
  } catch {
    await DBOS.runStep(() => cancelInvoice(db(), input), { name: 'cancelInvoice' });
    return 'compensated';
  }
  await DBOS.runStep(() => sendReceipt(db(), input), { name: 'sendReceipt' });
  return 'completed';
}

/**
 * The fan-out workflow in DBOS: the four branch steps started together (in one tick, so their
 * step ids follow the order of the calls, which recovery replays) and awaited with
 * `Promise.allSettled`; when one fails, the completed ones are undone together, then the invoice.
 */
async function fanoutWorkflow(input: BillingInput): Promise<string> {
  await DBOS.runStep(() => createInvoice(db(), input), { name: 'createInvoice' });
  const results = await Promise.allSettled(
    BRANCHES.map((b) => DBOS.runStep(() => prepare(db(), input, b), { name: `prepare-${b}` })),
  );
  if (results.some((r) => r.status === 'rejected')) {
    const done = BRANCHES.filter((_, i) => results[i]!.status === 'fulfilled');
    await Promise.allSettled(
      done.map((b) => DBOS.runStep(() => unprepare(db(), input, b), { name: `unprepare-${b}` })),
    );
    await DBOS.runStep(() => cancelInvoice(db(), input), { name: 'cancelInvoice' });
    return 'compensated';
  }
  await DBOS.runStep(() => sendReceipt(db(), input), { name: 'sendReceipt' });
  return 'completed';
}

const workflows = {
  billing: DBOS.registerWorkflow(billingWorkflow, { name: 'billing' }),
  fanout: DBOS.registerWorkflow(fanoutWorkflow, { name: 'fanout' }),
} satisfies Record<SagaShapeId, unknown>;

function configure(url: string): void {
  DBOS.setConfig({
    name: 'skiplock-bench',
    systemDatabaseUrl: url,
    logLevel: 'error',
    runAdminServer: false,
  });
}

export const dbos: SagaSystem = {
  id: 'dbos',
  async install(url) {
    // Launching creates DBOS's system tables; the benchmark runs then find them ready.
    configure(url);
    await DBOS.launch();
    await DBOS.shutdown();
  },
  async engine(url, shape) {
    const workflow = workflows[shape];
    pool = new pg.Pool({ connectionString: url, max: 10 });
    configure(url);
    await DBOS.launch();
    return {
      async start(input) {
        const handle = await DBOS.startWorkflow(workflow, { workflowID: `${shape}-${input.n}` })(
          input,
        );
        return { finished: handle.getResult().then(() => {}) };
      },
      async close() {
        await DBOS.shutdown();
        await pool?.end();
      },
    };
  },
};
