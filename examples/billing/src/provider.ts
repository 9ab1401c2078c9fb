import type pg from 'pg';

/**
 * A fake card processor. It stands for an external HTTP API: it keeps its own table
 * (`billing.provider_charges`, no foreign keys into ours) and writes it on its own connections,
 * never inside the caller's transaction. Like real processors it is idempotent by the key the
 * caller sends: a retried charge returns the first outcome and never charges twice.
 */

export interface ProviderRates {
  /** Share of charges declined (a business outcome: the saga compensates). */
  declineRate: number;
  /** Share of calls that fail with `ProviderUnavailableError` (the step retries). */
  transientRate: number;
  /** Share of charges answered `pending`, confirmed later by a webhook. */
  lateConfirmRate: number;
}

export interface ChargeRequest {
  invoiceId: string;
  customerId: string;
  amountCents: number;
}

export type ChargeStatus = 'succeeded' | 'pending' | 'declined' | 'voided' | 'refunded';

export interface ChargeOutcome {
  status: ChargeStatus;
  declineCode: string | null;
  /** True when this key was charged before: the provider answered from its record. */
  replayed: boolean;
}

/** The provider did not answer (or its answer was lost); safe to retry with the same key. */
export class ProviderUnavailableError extends Error {
  readonly code = 'provider_unavailable';
  constructor(readonly phase: 'before_charge' | 'after_charge') {
    super(`payment provider unavailable (${phase.replace('_', ' ')})`);
    this.name = 'ProviderUnavailableError';
  }
}

export interface FakeProviderOptions {
  pool: pg.Pool;
  rates: ProviderRates;
  /** Source of randomness in [0, 1); injected so tests can force every outcome. */
  random?: () => number;
  /** Each call takes up to this long, like a network round trip (default 0). */
  latencyMs?: number;
  /**
   * Called in the provider's own transaction when a charge is answered `pending`: the provider
   * promises a webhook, and the caller schedules its delivery (a delayed job) atomically with it.
   */
  onPending?: (tx: pg.PoolClient, key: string, request: ChargeRequest) => Promise<void>;
}

export interface FakeProvider {
  charge(key: string, request: ChargeRequest): Promise<ChargeOutcome>;
  /**
   * The webhook side: settles a pending charge (succeeded, or declined at `declineRate`) and
   * returns the charge's status; a second call returns the same. Null for an unknown key.
   */
  confirm(key: string): Promise<{ status: ChargeStatus; declineCode: string | null } | null>;
  /**
   * Voids a pending charge or refunds a succeeded one; for a key never charged, records it voided
   * so a late charge with that key is refused. Idempotent: returns the charge's final status
   * (`voided`, `refunded`, or `declined` when no money ever moved).
   */
  reverse(key: string, request: ChargeRequest): Promise<ChargeStatus>;
}

interface ChargeRow {
  status: ChargeStatus;
  decline_code: string | null;
  inserted: boolean;
}

const DECLINE_CODES = ['insufficient_funds', 'card_declined', 'expired_card'] as const;

export function createFakeProvider(options: FakeProviderOptions): FakeProvider {
  const { pool, rates } = options;
  const random = options.random ?? Math.random;
  const latencyMs = options.latencyMs ?? 0;

  async function inTransaction<T>(work: (tx: pg.PoolClient) => Promise<T>): Promise<T> {
    const tx = await pool.connect();
    try {
      await tx.query('BEGIN');
      const value = await work(tx);
      await tx.query('COMMIT');
      return value;
    } catch (error) {
      await tx.query('ROLLBACK').catch(() => {});
      throw error;
    } finally {
      tx.release();
    }
  }

  return {
    async charge(key, request) {
      if (latencyMs > 0) await sleep(random() * latencyMs);
      if (random() < rates.transientRate) throw new ProviderUnavailableError('before_charge');
      // The outcome is drawn once, at the first call with this key; later calls replay it.
      const pending = random() < rates.lateConfirmRate;
      const declined = !pending && random() < rates.declineRate;
      const status: ChargeStatus = pending ? 'pending' : declined ? 'declined' : 'succeeded';
      const declineCode = declined ? pickDeclineCode(random) : null;
      const row = await inTransaction(async (tx) => {
        const { rows } = await tx.query<ChargeRow>(
          `INSERT INTO billing.provider_charges
             (idempotency_key, invoice_id, customer_id, amount_cents, status, decline_code)
           VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (idempotency_key) DO UPDATE
             SET calls = provider_charges.calls + 1, updated_at = now()
           RETURNING status, decline_code, (xmax = 0) AS inserted`,
          [key, request.invoiceId, request.customerId, request.amountCents, status, declineCode],
        );
        const charged = rows[0]!;
        if (charged.inserted && charged.status === 'pending' && options.onPending) {
          await options.onPending(tx, key, request);
        }
        return charged;
      });
      // The charge happened but the answer never reached us: the caller retries with the same key.
      if (random() < rates.transientRate) throw new ProviderUnavailableError('after_charge');
      return { status: row.status, declineCode: row.decline_code, replayed: !row.inserted };
    },

    async confirm(key) {
      const declined = random() < rates.declineRate;
      const { rows } = await pool.query<{ status: ChargeStatus; decline_code: string | null }>(
        `WITH settled AS (
           UPDATE billing.provider_charges
              SET status = $2, decline_code = $3, updated_at = now()
            WHERE idempotency_key = $1 AND status = 'pending'
            RETURNING status, decline_code)
         SELECT status, decline_code FROM settled
         UNION ALL
         SELECT status, decline_code FROM billing.provider_charges
          WHERE idempotency_key = $1 AND NOT EXISTS (SELECT 1 FROM settled)`,
        [key, declined ? 'declined' : 'succeeded', declined ? pickDeclineCode(random) : null],
      );
      const row = rows[0];
      return row ? { status: row.status, declineCode: row.decline_code } : null;
    },

    async reverse(key, request) {
      const { rows } = await pool.query<{ status: ChargeStatus }>(
        `WITH tombstone AS (
           INSERT INTO billing.provider_charges
             (idempotency_key, invoice_id, customer_id, amount_cents, status)
           VALUES ($1, $2, $3, $4, 'voided')
           ON CONFLICT (idempotency_key) DO NOTHING
           RETURNING status),
         reversed AS (
           UPDATE billing.provider_charges
              SET status = CASE status WHEN 'pending' THEN 'voided'::billing.provider_charge_status
                                       ELSE 'refunded'::billing.provider_charge_status END,
                  updated_at = now()
            WHERE idempotency_key = $1 AND status IN ('pending', 'succeeded')
            RETURNING status)
         SELECT status FROM tombstone
         UNION ALL SELECT status FROM reversed
         UNION ALL
         SELECT status FROM billing.provider_charges
          WHERE idempotency_key = $1
            AND NOT EXISTS (SELECT 1 FROM tombstone) AND NOT EXISTS (SELECT 1 FROM reversed)`,
        [key, request.invoiceId, request.customerId, request.amountCents],
      );
      // Only when a concurrent first charge committed after this statement began: ask again.
      if (!rows[0]) throw new ProviderUnavailableError('before_charge');
      return rows[0].status;
    },
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function pickDeclineCode(random: () => number): string {
  return DECLINE_CODES[Math.floor(random() * DECLINE_CODES.length)] ?? 'card_declined';
}
