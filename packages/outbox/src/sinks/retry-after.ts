/**
 * The longest wait a receiver's `Retry-After` can impose. A confused or hostile receiver could
 * otherwise park a message for days; past an hour the relay's own backoff is the better judge.
 */
export const maxRetryAfterMs = 60 * 60 * 1_000;

const deltaSeconds = /^[0-9]+$/;
// RFC 9110 §5.6.7: the IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) and the obsolete RFC 850
// form (`Sunday, 06-Nov-94 08:49:37 GMT`). The shape is checked first because Date.parse alone
// accepts nearly anything (`1` is the year 2001).
const httpDate =
  /^[A-Za-z]{3,9}, [0-9]{2}[ -][A-Za-z]{3}[ -][0-9]{2,4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT$/;
// And the obsolete asctime form (`Sun Nov  6 08:49:37 1994`), which the RFC also requires a
// recipient to read; it names no zone and is UTC, which Date.parse takes only when told.
const asctimeDate = /^[A-Za-z]{3} [A-Za-z]{3} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}$/;

/**
 * A `Retry-After` header as ms from `now`, capped at `maxRetryAfterMs`; a date in the past is 0.
 * Anything unparseable is undefined: a bad header must not decide when a message is retried.
 */
export function parseRetryAfter(
  value: string | null | undefined,
  now: number = Date.now(),
): number | undefined {
  if (value == null) return undefined;
  const text = value.trim();
  let ms: number;
  if (deltaSeconds.test(text)) ms = Number(text) * 1_000;
  else if (httpDate.test(text)) ms = Date.parse(text) - now;
  else if (asctimeDate.test(text)) ms = Date.parse(`${text} GMT`) - now;
  else return undefined;
  if (!Number.isFinite(ms)) return ms > 0 ? maxRetryAfterMs : undefined;
  return Math.min(Math.max(Math.round(ms), 0), maxRetryAfterMs);
}
