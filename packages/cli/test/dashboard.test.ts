import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../../test/support/db.js';
import { runInProcess, startCli, type LongRunning } from './run-cli.js';

const db = await useTestDatabase();
const shape = fileURLToPath(
  new URL('../../../examples/billing/src/saga-shape.ts', import.meta.url),
);
const running: LongRunning[] = [];
afterAll(async () => {
  for (const cli of running) {
    cli.child.kill('SIGTERM');
    await cli.exited;
  }
});

async function start(args: string[], env: Record<string, string | undefined> = {}) {
  const cli = startCli(['dashboard', '--port', '0', ...args], { DATABASE_URL: db.url, ...env });
  running.push(cli);
  const line = await cli.waitForLine((l) => l.reason === 'dashboard_listening');
  return { cli, url: String(line.url), line };
}

describe('skiplock dashboard', () => {
  it('refuses a host other than loopback without a token, and bad flags', async () => {
    const open = await runInProcess(['dashboard', '--host', '0.0.0.0'], { DATABASE_URL: db.url });
    expect(open.code).toBe(2);
    expect(open.stderr).toContain('refusing to listen on 0.0.0.0 without a token');
    const short = await runInProcess(['dashboard', '--token', 'short'], { DATABASE_URL: db.url });
    expect(short.code).toBe(2);
    expect(short.stderr).toContain('--token must be at least 8 characters');
    const port = await runInProcess(['dashboard', '--port', 'x'], { DATABASE_URL: db.url });
    expect(port.code).toBe(2);
    const help = await runInProcess(['dashboard', '--help'], {});
    expect(help.stdout).toContain('--read-only');
  });

  it('serves the pages on loopback; without a token nothing can be changed; SIGTERM stops it', async () => {
    const { cli, url, line } = await start(['--module', shape]);
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
    expect(line).toMatchObject({ actions: 'none (no token)', sagas: ['billing v2'] });
    const overview = await fetch(url);
    expect(overview.status).toBe(200);
    expect(await overview.text()).toContain('<h1>Overview</h1>');
    expect((await fetch(`${url}sagas`)).status).toBe(200);
    const css = await fetch(`${url}assets/dashboard.css`);
    expect(css.headers.get('content-type')).toContain('text/css');
    const refused = await fetch(`${url}jobs/1/retry`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: url },
      body: '',
    });
    expect(refused.status).toBe(403);
    cli.child.kill('SIGTERM');
    expect((await cli.exited).code).toBe(0);
  });

  it('with a token on another address, reading needs signing in too', async () => {
    const { url } = await start(['--host', '0.0.0.0', '--read-only'], {
      SKIPLOCK_DASHBOARD_TOKEN: 'a-long-operator-token',
    });
    const local = url.replace('0.0.0.0', '127.0.0.1');
    const response = await fetch(local, { redirect: 'manual' });
    expect(response.status).toBe(303);
    expect(response.headers.get('location')).toBe('/sign-in?next=%2F');
  });
});
