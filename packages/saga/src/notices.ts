/**
 * Conditions already warned about, so that one a loop finds again on every pass (a queued saga of
 * a version this runtime does not know, seen by the reconciler every `intervalMs`) is warned once
 * and logged at debug after. Bounded: once full it starts over, so at worst a condition is warned
 * again, never that memory grows with the sagas a runtime has seen.
 */
export class Notices {
  private readonly seen = new Set<string>();
  constructor(private readonly max = 1_000) {}

  /** True the first time `key` is noted (since the set last started over). */
  first(key: string): boolean {
    if (this.seen.has(key)) return false;
    if (this.seen.size >= this.max) this.seen.clear();
    this.seen.add(key);
    return true;
  }
}
