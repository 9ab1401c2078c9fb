import pg from 'pg';

export interface StatementStats {
  calls: number;
  totalMs: number;
}

export interface QueryCounts {
  roundTrips: number;
  statements: Record<string, StatementStats>;
}

/** A short stable label for a statement: its first words, whitespace and parameters collapsed. */
function fingerprint(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  if (/^(BEGIN|COMMIT|ROLLBACK)/i.test(flat)) return flat.split(' ')[0]!.toUpperCase();
  return flat.slice(0, 90);
}

/**
 * Each statement text's label and claim test, worked out once: every statement passes here, and
 * the harness must charge no system more than another. Worked out per call, the label's
 * whitespace rewrite cost 6–9 µs on skiplock's 1,076-character insert against 0.5 µs on bare
 * SQL's 61 characters, about 2–3 % of skiplock's single enqueue (Node CPU 0.318 ms a job).
 * Bounded: past it, texts are labelled per call as before (statement texts are constants, but a
 * peer could inline values).
 */
const labels = new Map<string, { key: string; claim: boolean }>();
const MAX_LABELS = 10_000;

function labelOf(text: string, isClaim: (text: string) => boolean) {
  let label = labels.get(text);
  if (label === undefined) {
    label = { key: fingerprint(text), claim: isClaim(text) };
    if (labels.size < MAX_LABELS) labels.set(text, label);
  }
  return label;
}

let installed: QueryCounts | null = null;
const commitHooks = new WeakMap<object, () => void>();

/** Calls `fn` when `client`'s next COMMIT has returned (the counter must be installed). */
export function afterCommit(client: object, fn: () => void): void {
  commitHooks.set(client, fn);
}
const claimLatencies: number[] = [];
const MAX_SAMPLES = 1_000_000;

/**
 * Counts every statement any `pg` client in this process sends (one call is one round trip) and
 * times each one to its result. Peers that use the same `pg` module are counted the same way.
 *
 * A statement sent with a callback (every `pg.Pool.query` is: the pool hands the client one) gets
 * no promise back, so it is timed to its callback. Before `46349e5` such a statement was timed
 * only to its send, and that is what the queue scenarios' claim columns measured up to then (the
 * committed run of `af2daa8` among them): not the claim (bare SQL's claims of 100 on 2 M rows
 * "took" 0.03 ms at p50) but the synchronous part of `client.query`. Timed to the callback, a claim's time includes the wait for the worker's event
 * loop, busy with the jobs claimed before (one drain of 60,000 jobs at concurrency 10: skiplock's
 * claims 0.17–0.19 ms at p50 timed to the send, 14–15 ms timed to the callback), so those
 * columns are called "claim wait"; the claim's own cost is the claim probe's (`claimProbe`).
 */
export function installQueryCounter(isClaim: (text: string) => boolean): QueryCounts {
  if (installed) return installed;
  const counts: QueryCounts = { roundTrips: 0, statements: {} };
  installed = counts;
  const original = pg.Client.prototype.query as (...args: unknown[]) => unknown;
  (pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown }).query = function (
    this: pg.Client,
    ...args: unknown[]
  ) {
    const first = args[0];
    const text =
      typeof first === 'string'
        ? first
        : typeof (first as { text?: unknown } | null)?.text === 'string'
          ? (first as { text: string }).text
          : '';
    counts.roundTrips += 1;
    const { key, claim } = labelOf(text, isClaim);
    const entry = (counts.statements[key] ??= { calls: 0, totalMs: 0 });
    entry.calls += 1;
    const started = performance.now();
    const hook = key === 'COMMIT' ? commitHooks.get(this) : undefined;
    if (hook) commitHooks.delete(this);
    const done = () => {
      hook?.();
      const ms = performance.now() - started;
      entry.totalMs += ms;
      if (claim && claimLatencies.length < MAX_SAMPLES) claimLatencies.push(ms);
    };
    const last = args.length - 1;
    const callback = args[last];
    if (last > 0 && typeof callback === 'function') {
      args[last] = (...results: unknown[]) => {
        done();
        return (callback as (...a: unknown[]) => unknown)(...results);
      };
      return original.apply(this, args);
    }
    const result = original.apply(this, args);
    if (result && typeof (result as Promise<unknown>).then === 'function') {
      (result as Promise<unknown>).then(done, done);
    } else {
      done();
    }
    return result;
  };
  return counts;
}

/** Round-trip times of the statements `isClaim` picked, in milliseconds. */
export function takeClaimLatencies(): number[] {
  return claimLatencies.splice(0, claimLatencies.length);
}

export function snapshotCounts(): QueryCounts {
  if (!installed) return { roundTrips: 0, statements: {} };
  return structuredClone(installed);
}

export function diffCounts(after: QueryCounts, before: QueryCounts): QueryCounts {
  const statements: Record<string, StatementStats> = {};
  for (const [key, a] of Object.entries(after.statements)) {
    const b = before.statements[key] ?? { calls: 0, totalMs: 0 };
    if (a.calls - b.calls > 0) {
      statements[key] = { calls: a.calls - b.calls, totalMs: a.totalMs - b.totalMs };
    }
  }
  return { roundTrips: after.roundTrips - before.roundTrips, statements };
}
