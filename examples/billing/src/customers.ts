import type pg from 'pg';

/** Creates `count` customers with some prepaid credit each (from nothing up to `maxCreditCents`). */
export async function seedCustomers(
  db: pg.Pool | pg.ClientBase,
  options: { count: number; maxCreditCents: number; random?: () => number },
): Promise<string[]> {
  const random = options.random ?? Math.random;
  const ids: string[] = [];
  const credits: number[] = [];
  for (let i = 1; i <= options.count; i++) {
    ids.push(`cus_${String(i).padStart(4, '0')}`);
    credits.push(Math.floor(random() * (options.maxCreditCents / 100 + 1)) * 100);
  }
  await db.query(
    `INSERT INTO billing.customers (id, name, opening_balance_cents, balance_cents)
     SELECT id, 'Customer ' || id, credit, credit FROM unnest($1::text[], $2::int[]) AS c(id, credit)`,
    [ids, credits],
  );
  return ids;
}
