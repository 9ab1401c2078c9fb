import { createServer, request } from 'node:http';
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

/**
 * An operator's form POST as a script sends it, with the bearer token and a name, to `url` (the
 * redirect is not followed: its `location` says how the action went).
 */
export function operatorPost(url: string, token: string, body = ''): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    redirect: 'manual',
    headers: {
      authorization: `Bearer ${token}`,
      'x-skiplock-operator': 'ada',
      'content-type': 'application/x-www-form-urlencoded',
    },
    body,
  });
}

export interface RawResponse {
  status: number;
  location: string | undefined;
  cookie: string;
  /** The Set-Cookie headers whole, attributes and all. */
  setCookies: string[];
  text: string;
}

/**
 * Raw HTTP to a served dashboard, with whatever Host header a test names (fetch will not send
 * one): `send` makes one request, `operatorForm` is the headers of an operator's form post from
 * the dashboard's own origin with `token`. `localAddress`: the loopback address to send from
 * (127.0.0.2, say), to be another client.
 */
export function rawHttp(served: Served, token: string, localAddress?: string) {
  const { port } = new URL(served.url);
  const operatorForm = {
    host: `127.0.0.1:${port}`,
    origin: `http://127.0.0.1:${port}`,
    authorization: `Bearer ${token}`,
    'x-skiplock-operator': 'ada',
    'content-type': 'application/x-www-form-urlencoded',
  };
  function send(
    method: string,
    path: string,
    headers: Record<string, string>,
    body = '',
  ): Promise<RawResponse> {
    return new Promise((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port,
          localAddress,
          method,
          path,
          headers: { ...headers, 'content-length': Buffer.byteLength(body) },
        },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString()));
          res.on('end', () =>
            resolve({
              status: res.statusCode ?? 0,
              location: res.headers.location,
              // name=value of each cookie set, as a browser would send them back
              cookie: (res.headers['set-cookie'] ?? []).map((c) => c.split(';')[0]).join('; '),
              setCookies: res.headers['set-cookie'] ?? [],
              text,
            }),
          );
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  }
  /** Signs in from the dashboard's own origin; the answer's `cookie` is the session. */
  const signIn = (fields: Record<string, string> = {}) =>
    send(
      'POST',
      '/sign-in',
      {
        host: `127.0.0.1:${port}`,
        origin: `http://127.0.0.1:${port}`,
        'content-type': 'application/x-www-form-urlencoded',
      },
      new URLSearchParams({ operator: 'ada', token, ...fields }).toString(),
    );
  return { port, operatorForm, send, signIn };
}
