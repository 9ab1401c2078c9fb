import type { BillingSystem } from '../system.js';

/**
 * Opens `count` invoices (each with its saga, in one transaction), a few at a time, until done or
 * `signal` aborts (the run's deadline or an interrupt).
 */
export async function produceInvoices(
  system: BillingSystem,
  customers: readonly string[],
  count: number,
  options: { parallel?: number; random?: () => number; signal?: AbortSignal } = {},
): Promise<void> {
  const random = options.random ?? Math.random;
  const parallel = Math.min(options.parallel ?? 8, count);
  let next = 0;
  const lane = async () => {
    while (next < count && !options.signal?.aborted) {
      next += 1;
      const customerId = customers[Math.floor(random() * customers.length)]!;
      // $5 to $250, in whole cents.
      const amountCents = 500 + Math.floor(random() * 24_500);
      await system.openInvoice({ customerId, amountCents });
    }
  };
  await Promise.all(Array.from({ length: parallel }, lane));
}
