import { DBOS } from '@dbos-inc/dbos-sdk';
import pg from 'pg';
import { cancelInvoice, charge, createInvoice, sendReceipt, type BillingInput } from './billing.js';
import type { SagaSystem } from './types.js';

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

const workflow = DBOS.registerWorkflow(billingWorkflow, { name: 'billing' });

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
  async engine(url) {
    pool = new pg.Pool({ connectionString: url, max: 10 });
    configure(url);
    await DBOS.launch();
    return {
      async start(input) {
        const handle = await DBOS.startWorkflow(workflow, { workflowID: `billing-${input.n}` })(
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
