import type { Broker } from './types.js';

// Loaded on demand, so a child process for one broker never loads the other's client.
const loaders: Record<Broker['id'], () => Promise<Broker>> = {
  nats: async () => (await import('./nats.js')).nats,
  rabbitmq: async () => (await import('./rabbitmq.js')).rabbitmq,
};

export const brokerIds = Object.keys(loaders) as Broker['id'][];

export function broker(id: Broker['id']): Promise<Broker> {
  return loaders[id]();
}
