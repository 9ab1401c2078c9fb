import { createServer, type Server } from 'node:http';
import { Registry } from 'prom-client';
import { ConfigError } from './errors.js';
import { isRegistry } from './metrics.js';

/** A prom-client registry, or what carries one (a worker's or a saga runtime's `metrics`). */
export type MetricsSource = Registry | { readonly registry: Registry };

export interface MetricsServerOptions {
  /**
   * What to serve: a prom-client `Registry` (give the same one to `createWorker` and
   * `createSagaRuntime`), a worker's or runtime's `metrics`, or several of them, merged on each
   * scrape (their metric names must not overlap).
   */
  registry: MetricsSource | readonly MetricsSource[];
  /** A TCP port, 0 to 65535 (0: a free one, read back from `url`). */
  port: number;
  /** Where to listen; default loopback only (`127.0.0.1`). */
  host?: string | undefined;
}

/**
 * Serves `GET /metrics` in the Prometheus text format with the registry's own content type. A
 * scrape reads only what is in process: the job gauges come from a periodic query
 * (`createJobGauges`, or a worker's `jobGauges`, on in one process), never from a query per scrape.
 */
export async function serveMetrics(
  options: MetricsServerOptions,
): Promise<{ server: Server; url: string; close(): Promise<void> }> {
  const registries = [options.registry].flat().map((r) => {
    const registry = isRegistry(r) ? r : (r as { registry?: unknown } | null)?.registry;
    if (!isRegistry(registry)) {
      throw new ConfigError('invalid serveMetrics options: registry: give a prom-client Registry');
    }
    return registry;
  });
  if (registries.length === 0) {
    throw new ConfigError('invalid serveMetrics options: registry: give at least one registry');
  }
  // Checked here, not by Node: a string port listened on a Unix socket of that name, no port a
  // random one, and an empty host on every address where the default is loopback only.
  const { host = '127.0.0.1' } = options;
  // A string of digits (an environment variable passed on) is the port it spells, as for Node.
  const asked =
    typeof options.port === 'string' && /^\d{1,5}$/.test(options.port)
      ? Number(options.port)
      : options.port;
  if (!Number.isInteger(asked) || asked < 0 || asked > 65_535) {
    throw new ConfigError(
      `invalid serveMetrics options: port must be an integer from 0 to 65535, not ${String(asked)}`,
    );
  }
  if (typeof host !== 'string' || host.trim() === '') {
    throw new ConfigError(
      'invalid serveMetrics options: host must be a host name or address; leave it out for loopback',
    );
  }
  const unique = [...new Set(registries)];
  const registry = unique.length === 1 ? unique[0]! : null;
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || req.url?.split('?')[0] !== '/metrics') {
      res.writeHead(404).end('not found\n');
      return;
    }
    // Merged per scrape, so metrics registered after the server started are served too; a merge
    // that fails (two registries with the same metric) answers 500 rather than throw here.
    void (async () => {
      try {
        const source = registry ?? Registry.merge(unique);
        const body = await source.metrics();
        res.writeHead(200, { 'content-type': source.contentType }).end(body);
      } catch (error) {
        res
          .writeHead(500, { 'content-type': 'text/plain' })
          .end(`metrics failed: ${error instanceof Error ? error.message : String(error)}\n`);
      }
    })();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(asked, host, () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : asked;
  return {
    server,
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}/metrics`,
    // A connection that never sends a request (a pre-connected browser socket, a TCP check that
    // stays open) kept close() waiting for good: closed a second after the server, which leaves
    // a scrape in flight that long to finish.
    close: () =>
      new Promise((resolve) => {
        const cut = setTimeout(() => server.closeAllConnections(), 1_000);
        server.close(() => {
          clearTimeout(cut);
          resolve();
        });
        server.closeIdleConnections();
      }),
  };
}
