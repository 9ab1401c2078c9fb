import { sql } from 'drizzle-orm';

/** Stores a signal once: a second delivery of the same name inserts nothing. */
export function insertSignal(sagaId: string, name: string, payloadJson: string) {
  return sql`
    INSERT INTO skiplock.saga_signals (saga_id, name, payload)
    VALUES (${sagaId}, ${name}, ${payloadJson}::jsonb)
    ON CONFLICT (saga_id, name) DO NOTHING
    RETURNING name`;
}

export function selectSignal(sagaId: string, name: string) {
  return sql`
    SELECT payload FROM skiplock.saga_signals WHERE saga_id = ${sagaId} AND name = ${name}`;
}

export function consumeSignal(sagaId: string, name: string) {
  return sql`
    UPDATE skiplock.saga_signals SET consumed_at = coalesce(consumed_at, now())
    WHERE saga_id = ${sagaId} AND name = ${name}`;
}

export interface SignalRow {
  name: string;
  payload: unknown;
  received_at: Date;
  consumed_at: Date | null;
}

export function selectSignals(sagaId: string) {
  return sql`
    SELECT name, payload, received_at, consumed_at FROM skiplock.saga_signals
    WHERE saga_id = ${sagaId} ORDER BY received_at, name`;
}
