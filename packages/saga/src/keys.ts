/**
 * The names a saga's jobs carry: their idempotency keys (`saga:<id>:<step>`, the compensation's
 * and the wait timeout's), their job types, and the rules for the saga ids in those keys (which
 * the runtime and the reads check ids by). Apart from the engine, so that the definition (which
 * names its jobs' types) needs nothing of the engine.

/**
 * A saga id as it appears in its jobs' idempotency keys. Ordinary characters (printable ASCII
 * other than `%` and `:`) stay as they are; `%`, `:` and every other character are percent-encoded
 * as UTF-8 (`%3A`, `%25`, `%C3%BC`). So a key never holds a `:` of the id, `%` only starts an
 * escape, and the encoding is one-to-one: two ids never share a key.
 */
export const keyId = (sagaId: string): string =>
  sagaId.replace(/[^\x21-\x24\x26-\x39\x3b-\x7e]/gu, (c) =>
    [...Buffer.from(c, 'utf8')]
      .map((b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`)
      .join(''),
  );

/** The saga id a job key of this runtime names (see `keyId`), or null for any other key. */
export function sagaIdOfKey(key: string | null): string | null {
  const encoded = key?.match(/^saga:([^:]+):/)?.[1];
  if (encoded === undefined) return null;
  try {
    return decodeURIComponent(encoded);
  } catch {
    return null;
  }
}

/**
 * The longest encoded id: with `saga:`, `:compensate:` and a 48-character step name a key stays
 * within the queue's 512-character idempotency keys.
 */
export const MAX_KEY_ID_LENGTH = 400;

/** The longest saga id, in characters (code points): see the runtime's `checkSagaId`. */
export const MAX_SAGA_ID_CHARS = 200;
/**
 * What a saga id may not hold: whitespace, control characters and lone surrogates (which
 * PostgreSQL would store as U+FFFD).
 */
export const SAGA_ID_UNFIT =
  /[\s\p{Cc}]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/u;

// Step names are letters, digits, `_` and `-` (checked by `defineSaga`), so after `saga:<id>:`
// one segment is a step, and two are a compensation or a wait's timeout, told apart by the word.
export const stepKey = (sagaId: string, step: string) => `saga:${keyId(sagaId)}:${step}`;
export const compensationKey = (sagaId: string, step: string) =>
  `saga:${keyId(sagaId)}:compensate:${step}`;
export const timeoutKey = (sagaId: string, step: string) => `saga:${keyId(sagaId)}:timeout:${step}`;

/** Every saga job's type starts with this; such a job moves only with its saga. */
export const SAGA_JOB_PREFIX = 'saga:';

/** Whether a queue job is a saga's step, compensation or timeout (tools must not act on it alone). */
export const isSagaJobType = (type: string): boolean => type.startsWith(SAGA_JOB_PREFIX);

/** Job types name the saga, its version and the step, so an unknown version dies as unknown. */
export const jobType = (
  def: { name: string; version: number },
  step: string,
  what: 'run' | 'compensate' | 'timeout',
) => `${SAGA_JOB_PREFIX}${def.name}:v${def.version}:${step}${what === 'run' ? '' : `:${what}`}`;
