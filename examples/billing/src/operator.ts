/**
 * The billing saga's definition for skiplock's operator tools, which need a saga's definition to
 * draw its steps, cancel or retry it, or deliver its signal. After a demo run that kept its
 * database (`DATABASE_URL=postgres://... pnpm demo --keep` names it):
 *
 *   pnpm skiplock sagas graph billing --module examples/billing/src/operator.ts
 *   DATABASE_URL=postgres://.../<kept database> pnpm skiplock dashboard \
 *     --module examples/billing/src/operator.ts
 *
 * The tools run no step here, so the pool below never connects (a pool opens connections only
 * when a query is sent). Workers wire the saga in `worker/main.ts`.
 */
import pg from 'pg';
import { pino } from 'pino';
import { createBillingSystem } from './system.js';

const logger = pino({ name: 'billing-operator', level: 'warn' });
const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL,
  max: 2,
  application_name: 'billing-operator',
});
pool.on('error', (error) =>
  logger.warn({ reason: 'db_error', err: error.message }, 'idle connection error'),
);

const system = createBillingSystem({
  pool,
  logger,
  rates: { declineRate: 0, transientRate: 0, lateConfirmRate: 0 },
});

/** The billing saga, as `createBillingSaga` defines it for the demo's workers. */
export const billing = system.saga;
