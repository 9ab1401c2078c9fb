import { runSql, type Queryable } from '@skiplock/queue/engine';
import type { AnySagaDefinition, SagaLock } from './define.js';
import { SagaError } from './errors.js';
import { lockKeyTurn, selectLockHolder, type KeyTurnRow, type LockHolderRow } from './sql/locks.js';

const MAX_LOCK_KEY_CHARS = 200;

/**
 * The lock key of a saga's parsed input, checked: a non-empty string of at most 200 characters.
 * A key function that throws or returns anything else refuses the start (code
 * `invalid_lock_key`, naming the saga, not the input); nothing is written.
 */
export function lockKeyOf(def: AnySagaDefinition, lock: SagaLock, input: unknown): string {
  let key: unknown;
  try {
    key = lock.key(input);
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    throw new SagaError('invalid_lock_key', `saga "${def.name}": lockKey threw: ${why}`);
  }
  if (typeof key !== 'string' || key.length === 0 || [...key].length > MAX_LOCK_KEY_CHARS) {
    const got = typeof key === 'string' ? `a string of ${[...key].length} characters` : typeof key;
    throw new SagaError(
      'invalid_lock_key',
      `saga "${def.name}": lockKey must return a string of 1-${MAX_LOCK_KEY_CHARS} characters, got ${got}`,
    );
  }
  return key;
}

/**
 * Takes the key's turn lock for the rest of the transaction (see `lockKeyTurn`); with `wait:
 * false` only when it is free, returning false otherwise. Refuses a transaction that is not READ
 * COMMITTED (code `lock_key_isolation`): its fixed snapshot could miss the last holder's end.
 */
export async function takeKeyTurn(
  tx: Queryable,
  name: string,
  key: string,
  wait = true,
): Promise<boolean> {
  const turn = (await runSql<KeyTurnRow>(tx, lockKeyTurn(name, key, wait))).rows[0]!;
  if (turn.isolation !== 'read committed') {
    throw new SagaError(
      'lock_key_isolation',
      `saga "${name}" has a lockKey: start, retry and end it in a READ COMMITTED transaction, not ${turn.isolation.toUpperCase()}`,
    );
  }
  return turn.taken;
}

/**
 * Takes the key's turn lock and says who holds the key: the active saga, else the first queued
 * one, else null (the key is free). A start then inserts its saga `running` or `queued`; an
 * operator's retry goes ahead only while the key is free.
 */
export async function lockHolder(
  tx: Queryable,
  name: string,
  key: string,
): Promise<LockHolderRow | null> {
  await takeKeyTurn(tx, name, key);
  return (await runSql<LockHolderRow>(tx, selectLockHolder(name, key))).rows[0] ?? null;
}

/**
 * Whether a saga other than `saga` holds its lock key now (false without a key). A failed saga
 * let go of its key, so it takes it back (an operator's retry, or its child's end after one) only
 * while this is false, in the same transaction, under the key's turn lock.
 */
export async function keyHeldByOther(
  tx: Queryable,
  saga: { id: string; name: string; lock_key: string | null },
): Promise<boolean> {
  if (saga.lock_key === null) return false;
  const holder = await lockHolder(tx, saga.name, saga.lock_key);
  return holder !== null && holder.id !== saga.id;
}
