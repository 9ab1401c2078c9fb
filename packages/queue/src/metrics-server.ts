import { createServer, type Server } from 'node:http';
import type { Client } from './client.js';
import type { Metrics } from './metrics.js';

export interface MetricsServerOptions {
  /** In-process counters to expose (a worker's, a sweeper's). */
  metrics: readonly Metrics[];
  /** When given, queue depth and oldest runnable age are read from the database on each scrape. */
  client?: Client | undefined;
  port: number;
  host?: string | undefined;
}

/**
 * Serves `GET /metrics` in the Prometheus text format: the given in-process counters plus queue
 * depth per queue and status. A failed depth query is reported as `skiplock_scrape_error 1`
 * rather than failing the scrape, so counters stay visible while the database is down.
 */
export async function serveMetrics(
  options: MetricsServerOptions,
): Promise<{ server: Server; url: string; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || req.url !== '/metrics') {
      res.writeHead(404).end('not found\n');
      return;
    }
    void render(options).then((body) => {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(body);
    });
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

function label(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

async function render(options: MetricsServerOptions): Promise<string> {
  const parts = options.metrics.map((m) => m.toPrometheus());
  if (options.client) {
    try {
      const stats = await options.client.stats();
      const lines = ['# TYPE skiplock_queue_depth gauge'];
      for (const s of stats) {
        lines.push(
          `skiplock_queue_depth{queue="${label(s.queue)}",status="${s.status}"} ${s.count}`,
        );
      }
      lines.push('# TYPE skiplock_oldest_runnable_age_seconds gauge');
      for (const s of stats) {
        if (s.oldestRunnableAgeMs !== null) {
          lines.push(
            `skiplock_oldest_runnable_age_seconds{queue="${label(s.queue)}",status="${s.status}"} ${s.oldestRunnableAgeMs / 1000}`,
          );
        }
      }
      lines.push('skiplock_scrape_error 0');
      parts.push(lines.join('\n') + '\n');
    } catch {
      parts.push('skiplock_scrape_error 1\n');
    }
  }
  return parts.join('');
}
