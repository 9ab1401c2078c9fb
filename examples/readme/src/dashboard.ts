// Mount the dashboard in your own node:http server: the top README's dashboard snippet, as a
// complete program.
// Run: DATABASE_URL=postgres://... SKIPLOCK_DASHBOARD_TOKEN=... npx tsx dashboard.ts
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { createDashboard } from '@skiplock/dashboard';
import { migrate } from '@skiplock/saga';

const pool = new pg.Pool({ connectionString: process.env['DATABASE_URL'] });
await migrate({ pool });

const dashboard = createDashboard({
  pool,
  basePath: '/admin/skiplock',
  // Retry, cancel and signal need it; without one the dashboard only reads.
  token: process.env['SKIPLOCK_DASHBOARD_TOKEN'] ?? null,
  // Your saga definitions draw them and let operators cancel and signal: `sagas: [billing]`.
  sagas: [],
  // What operators see of a payload: here card numbers never reach the page.
  redact: (type, payload) => (type === 'charge-card' ? { redacted: true } : payload),
});

const server = createServer((req, res) => {
  if (req.url?.startsWith('/admin/skiplock')) return dashboard(req, res);
  res.writeHead(200, { 'content-type': 'text/plain' }).end('your application\n');
});
// Loopback only; anywhere else, put your own authentication in front of /admin/skiplock.
server.listen(0, '127.0.0.1');

// A real server runs until SIGTERM; this program reads the overview once, then stops.
await new Promise((resolve) => server.once('listening', resolve));
const { port } = server.address() as AddressInfo;
const response = await fetch(`http://127.0.0.1:${port}/admin/skiplock/`);
const title = /<title>([^<]*)<\/title>/.exec(await response.text())?.[1];
console.log(`GET /admin/skiplock/: ${response.status} ${title}`);
server.close();
await dashboard.close();
await pool.end();
if (response.status !== 200) process.exit(1);
