import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Dashboard } from '../src/index.js';

export interface Served {
  url: string;
  close(): Promise<void>;
}

/** Serves a dashboard on a free loopback port, as `node:http` would in an application. */
export async function serve(dashboard: Dashboard): Promise<Served> {
  const server = createServer(dashboard);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
