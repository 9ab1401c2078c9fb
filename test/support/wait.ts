/**
 * Polls `check` until it returns a truthy value. For state that lives in the database (where no
 * event can be awaited), with a deadline so a broken test fails instead of hanging.
 */
export async function waitFor<T>(
  check: () => Promise<T> | T,
  { timeoutMs = 20_000, intervalMs = 25, what = 'condition' } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
