import { connect } from 'node:net';

/**
 * Whether something accepts TCP connections at the URL's host and port within `timeoutMs`: how
 * the tests, the demo and the benchmark tell whether a broker (NATS, RabbitMQ) is there to use.
 */
export function tcpAnswers(url: string, defaultPort: number, timeoutMs = 1_000): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect({ host: hostname, port: Number(port || defaultPort) });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}
