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
  port: number;
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
    server.listen(options.port, options.host ?? '127.0.0.1', () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : options.port;
  return {
    server,
    url: `http://${options.host ?? '127.0.0.1'}:${port}/metrics`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
