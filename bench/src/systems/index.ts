import type { QueueSystem } from './types.js';

// Loaded on demand, so a child process for one system never loads the others' libraries.
const loaders: Record<string, () => Promise<QueueSystem>> = {
  skiplock: async () => (await import('./skiplock.js')).skiplock,
  'skiplock-poll': async () => (await import('./skiplock.js')).skiplockPolling,
  'skiplock-sync': async () => (await import('./skiplock.js')).skiplockSyncCommit,
  'skiplock-unprepared': async () => (await import('./skiplock.js')).skiplockUnprepared,
  'skiplock-untraced': async () => (await import('./skiplock.js')).skiplockUntraced,
  'skiplock-otel': async () => (await import('./skiplock.js')).skiplockOtel,
  bare: async () => (await import('./bare.js')).bare,
  graphile: async () => (await import('./graphile.js')).graphileDefaults,
  'graphile-lq': async () => (await import('./graphile.js')).graphileLocalQueue,
  pgboss: async () => (await import('./pgboss.js')).pgboss,
  'skiplock-keyed': async () => (await import('./skiplock.js')).skiplockKeyed,
  pgboss12: async () => (await import('./pgboss12.js')).pgboss12,
  'pgboss12-group': async () => (await import('./pgboss12.js')).pgboss12Group,
};

export const queueSystemIds = Object.keys(loaders);

export async function queueSystem(id: string): Promise<QueueSystem> {
  const load = loaders[id];
  if (!load) throw new Error(`unknown queue system "${id}" (${queueSystemIds.join(', ')})`);
  return load();
}
