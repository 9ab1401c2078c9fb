import type { DemoFlags } from './flags.js';
import { wrapParts } from './wrap.js';

/** What the run is about to do, wrapped to the demo's width. */
export function formatHeader(flags: DemoFlags): string[] {
  const pct = (r: number) => `${Math.round(r * 100)}%`;
  return wrapParts('Billing demo: ', [
    `${flags.count} sagas on ${flags.workers} worker processes`,
    `declines ${pct(flags['decline-rate'])}`,
    `transient faults ${pct(flags['transient-rate'])}`,
    `late confirmations ${pct(flags['late-confirm-rate'])}`,
    ...(flags['kill-workers'] ? ['one worker killed with SIGKILL mid-run'] : []),
  ]);
}
