import type { SagaRuntime, SagaView } from '@skiplock/saga';
import type pg from 'pg';
import { checkInvariants, type InvariantResult } from '../invariants.js';

export interface SagaCounts {
  total: number;
  completed: number;
  compensated: number;
  failed: number;
  cancelled: number;
  /** Queued, running, waiting or compensating. */
  unfinished: number;
}

export interface DemoReport {
  counts: SagaCounts;
  /** Step and compensation attempts beyond the first. */
  retries: number;
  /** Charge calls the provider answered from its record instead of charging again. */
  replayedCharges: number;
  charges: Record<string, number>;
  /** Compensated sagas by the step that failed for good. */
  compensatedBy: Record<string, number>;
  /** Invoices a decline voided after the pivot (the saga went forward, nothing to undo). */
  voidedLate: number;
  /** Charges the provider confirmed later, through its webhook. */
  webhooks: number;
  /** First saga start to last saga finish. */
  elapsedMs: number;
  p50Ms: number | null;
  p95Ms: number | null;
  invariants: InvariantResult[];
  /** A compensated saga with its history, to show what compensation looks like. */
  example: SagaView | null;
}

/** Saga counts by outcome; cheap enough to poll for the progress display. */
export async function countSagas(db: pg.Pool): Promise<SagaCounts> {
  const { rows } = await db.query<{ status: string; n: string }>(
    `SELECT status, count(*) AS n FROM skiplock.sagas GROUP BY status`,
  );
  const by = Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
  const get = (s: string) => by[s] ?? 0;
  const total = rows.reduce((sum, r) => sum + Number(r.n), 0);
  return {
    total,
    completed: get('completed'),
    compensated: get('compensated'),
    failed: get('failed'),
    cancelled: get('cancelled'),
    unfinished: get('queued') + get('running') + get('waiting') + get('compensating'),
  };
}

export async function collectReport(db: pg.Pool, runtime: SagaRuntime): Promise<DemoReport> {
  const counts = await countSagas(db);
  const timing = await db.query<{ p50: number | null; p95: number | null; elapsed: number | null }>(
    `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50,
            percentile_cont(0.95) WITHIN GROUP (ORDER BY ms) AS p95,
            (SELECT EXTRACT(EPOCH FROM max(finished_at) - min(created_at)) * 1000
               FROM skiplock.sagas) AS elapsed
       FROM (SELECT EXTRACT(EPOCH FROM finished_at - created_at) * 1000 AS ms
               FROM skiplock.sagas WHERE finished_at IS NOT NULL) t`,
  );
  const retries = await db.query<{ n: string | null }>(
    `SELECT sum(attempts - 1) AS n FROM skiplock.saga_steps WHERE attempts > 1`,
  );
  const charges = await db.query<{ status: string; n: string; replays: string }>(
    `SELECT status, count(*) AS n, sum(calls - 1) AS replays
       FROM billing.provider_charges GROUP BY status ORDER BY status`,
  );
  const failedSteps = await db.query<{ step: string; n: string }>(
    `SELECT st.step, count(*) AS n
       FROM skiplock.sagas s JOIN skiplock.saga_steps st ON st.saga_id = s.id
      WHERE s.status = 'compensated' AND st.kind = 'step' AND st.status = 'failed'
      GROUP BY st.step ORDER BY count(*) DESC, st.step`,
  );
  const voidedLate = await db.query<{ n: string }>(
    `SELECT count(*) AS n FROM billing.invoices
      WHERE status = 'void' AND void_reason LIKE 'card declined late:%'`,
  );
  const webhooks = await db.query<{ n: string }>(
    `SELECT count(*) AS n FROM skiplock.jobs
      WHERE job_type = 'billing.provider-webhook' AND status = 'completed'`,
  );
  // The most eventful compensated saga makes the best example.
  const pick = await db.query<{ saga_id: string }>(
    `SELECT s.id AS saga_id
       FROM skiplock.sagas s JOIN skiplock.saga_steps st ON st.saga_id = s.id
      WHERE s.status = 'compensated'
      GROUP BY s.id ORDER BY count(*) + sum(st.attempts) DESC, s.id LIMIT 1`,
  );
  const row = timing.rows[0];
  const exampleId = pick.rows[0]?.saga_id;
  return {
    counts,
    retries: Number(retries.rows[0]?.n ?? 0),
    replayedCharges: charges.rows.reduce((sum, r) => sum + Number(r.replays ?? 0), 0),
    charges: Object.fromEntries(charges.rows.map((r) => [r.status, Number(r.n)])),
    compensatedBy: Object.fromEntries(failedSteps.rows.map((r) => [r.step, Number(r.n)])),
    voidedLate: Number(voidedLate.rows[0]?.n ?? 0),
    webhooks: Number(webhooks.rows[0]?.n ?? 0),
    elapsedMs: Number(row?.elapsed ?? 0),
    p50Ms: row?.p50 === null || row?.p50 === undefined ? null : Number(row.p50),
    p95Ms: row?.p95 === null || row?.p95 === undefined ? null : Number(row.p95),
    invariants: await checkInvariants(db),
    example: exampleId ? await runtime.getSaga(exampleId) : null,
  };
}
