import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../../test/support/db.js';
import { createBillingSystem } from '../src/system.js';
import { customerWith, migrated, silent } from './harness.js';

const run = promisify(execFile);
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const cli = fileURLToPath(new URL('../../../packages/cli/src/main.ts', import.meta.url));
const operatorModule = fileURLToPath(new URL('../src/operator.ts', import.meta.url));

/** The CLI from source, as an operator runs `pnpm skiplock ...` in this repository. */
function skiplock(args: string[], env: Record<string, string>) {
  return run(process.execPath, ['--import', tsx, cli, ...args], {
    env: { ...process.env, ...env },
    timeout: 60_000,
  });
}

describe("the billing saga's module for the operator tools (src/operator.ts)", () => {
  it('draws the saga with no database, and lets an operator cancel a billing saga', async () => {
    const graph = await skiplock(['sagas', 'graph', 'billing', '--module', operatorModule], {
      DATABASE_URL: '',
    });
    expect(graph.stdout).toContain('flowchart TD');
    expect(graph.stdout).toContain('charge-card (pivot)');

    const db = await useTestDatabase();
    await migrated(db.pool);
    // A saga started with no worker running: it waits at its first step, before its pivot.
    const system = createBillingSystem({
      pool: db.pool,
      logger: silent,
      rates: { declineRate: 0, transientRate: 0, lateConfirmRate: 0 },
    });
    try {
      const customerId = await customerWith(db.pool, 0);
      const id = await system.openInvoice({ customerId, amountCents: 1_000 });
      const cancel = await skiplock(['sagas', 'cancel', id, '--module', operatorModule], {
        DATABASE_URL: db.url,
      });
      expect(cancel.stdout).toBe(
        `saga ${id}: cancel accepted; it is cancelled and compensates what it completed\n`,
      );
      expect((await system.runtime.getSaga(id))?.status).toBe('cancelled');
    } finally {
      await system.runtime.close();
    }
  });
});
