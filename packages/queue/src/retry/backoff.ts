/**
 * Exponential backoff with jitter and a cap. Pure: the delay is added to the database's `now()` by
 * the settle statement, so no worker clock ever decides when a job runs.
 */
export interface BackoffOptions {
  /** Delay before the first retry, before jitter. */
  baseMs: number;
  /** Growth per attempt. */
  factor: number;
  /** Upper bound of any delay, jitter included. */
  maxMs: number;
  /** Share of the delay that is randomized, 0 (none) to 1 (full jitter). */
  jitter: number;
}

export const defaultBackoff: BackoffOptions = {
  baseMs: 1_000,
  factor: 2,
  maxMs: 60 * 60 * 1_000,
  jitter: 0.5,
};

/**
 * `given` over the defaults, field by field. A field given as `undefined` (a value read from an
 * unset environment variable, say) keeps its default: spread over them, it replaced the default
 * with `undefined`, every delay came out NaN, and a failed attempt's settle and the sweeper's
 * whole pass failed on an interval out of range (found by an audit).
 */
export function backoffWith(given: Partial<BackoffOptions> | undefined): BackoffOptions {
  const merged = { ...defaultBackoff };
  for (const [field, value] of Object.entries(given ?? {})) {
    if (value !== undefined) merged[field as keyof BackoffOptions] = value;
  }
  return merged;
}

/**
 * Delay before retrying after failed attempt number `attempt` (1-based): the capped exponential
 * delay `d`, of which `(1 - jitter)` is kept and the rest drawn at random, so that many jobs failing
 * together do not retry together. The result lies in `[d * (1 - jitter), d]`.
 */
export function computeBackoffMs(
  attempt: number,
  options: BackoffOptions = defaultBackoff,
  random: () => number = Math.random,
): number {
  const exponent = Math.max(0, attempt - 1);
  // factor ** exponent overflows to Infinity past a few hundred attempts (10 ** 309), and a base
  // of 0 times that is NaN: the settle then failed on an interval out of range (found in review).
  const grown = options.baseMs === 0 ? 0 : options.baseMs * options.factor ** exponent;
  const capped = Math.min(options.maxMs, grown);
  const fixed = capped * (1 - options.jitter);
  return Math.round(fixed + capped * options.jitter * random());
}
