import { connect } from 'node:net';

/** Whether something accepts TCP connections at the URL's host and port within 1 s. */
export function answers(url: string, defaultPort: number): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect({ host: hostname, port: Number(port || defaultPort) });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/** The URL's host and port, without credentials. */
export function hostOf(url: string): string {
  return new URL(url).host;
}
