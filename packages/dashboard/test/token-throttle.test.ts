import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { createDashboard, type DashboardOptions } from '../src/index.js';
import { clientOf } from '../src/token-throttle.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { rawHttp, serve, type Served } from './support.js';

// Wrong operator tokens had no limit: a short or guessable token could be tried without end. The
// session cookie had no Secure flag behind a proxy that ends TLS (both noted in an audit).

const db = await useTestDatabase();
const silent = pino({ level: 'silent' });
const token = 'a-long-random-operator-token-for-tests';
const opened: { served: Served; close(): Promise<void> }[] = [];
afterAll(async () => {
  for (const o of opened) {
    await o.served.close();
    await o.close();
  }
});

async function served(options: Partial<DashboardOptions> = {}) {
  const dashboard = createDashboard({ pool: db.pool, token, logger: silent, ...options });
  const s = await serve(dashboard);
  opened.push({ served: s, close: () => dashboard.close() });
  return s;
}

/** A client at a loopback address of its own: signs in, or calls an action with a bearer. */
function client(s: Served, address: string) {
  const raw = rawHttp(s, token, address);
  const host = `127.0.0.1:${raw.port}`;
  return {
    signIn: (given: string, origin = `http://${host}`) =>
      raw.send(
        'POST',
        '/sign-in',
        { host, origin, 'content-type': 'application/x-www-form-urlencoded' },
        new URLSearchParams({ operator: 'ada', token: given }).toString(),
      ),
    bearer: (given: string) =>
      raw.send(
        'POST',
        '/jobs/1/retry',
        {
          ...raw.operatorForm,
          authorization: `Bearer ${given}`,
        },
        '',
      ),
  };
}

describe('wrong operator tokens', () => {
  it('are refused from a client past its limit, the right token too, while other clients go on', async () => {
    const logs = captureLogs();
    const s = await served({
      tokenFailureLimit: { perClient: 3, total: 100 },
      logger: logs.logger,
    });
    const mallory = client(s, '127.0.0.2');
    for (let i = 0; i < 3; i++) expect((await mallory.signIn(`guess-${i}`)).status).toBe(401);
    // Before: every guess was checked, and the right one signed in.
    const blocked = await mallory.signIn(token);
    expect(blocked.status).toBe(429);
    expect(blocked.cookie).toBe('');
    expect(blocked.text).toContain('Too many wrong operator tokens');
    expect((await mallory.bearer(token)).status).toBe(429);
    expect((await mallory.bearer('another-guess')).status).toBe(429);
    const ada = client(s, '127.0.0.3');
    const signedIn = await ada.signIn(token);
    expect(signedIn.status).toBe(303);
    expect(signedIn.cookie).toContain('skiplock_dashboard=');
    expect(logs.lines.filter((l) => l.reason === 'dashboard_token_throttled')).toEqual([
      expect.objectContaining({ client: '127.0.0.2', action: 'sign_in' }),
    ]);
  });

  it('counts a bearer and a sign-in alike, and takes tokens again once the window has passed', async () => {
    const s = await served({ tokenFailureLimit: { perClient: 2, windowMs: 1_500 } });
    const script = client(s, '127.0.0.4');
    expect((await script.bearer('guess')).status).toBe(401);
    expect((await script.signIn('guess')).status).toBe(401);
    const refused = await script.signIn(token);
    expect(refused.status).toBe(429);
    await new Promise((resolve) => setTimeout(resolve, 1_600));
    expect((await script.signIn(token)).status).toBe(303);
  });

  it('are refused from every client once all of them together reach the total, but for clients that gave the right token lately', async () => {
    const s = await served({ tokenFailureLimit: { perClient: 100, total: 3 } });
    const operator = client(s, '127.0.0.12');
    expect((await operator.signIn(token)).status).toBe(303);
    for (const address of ['127.0.0.5', '127.0.0.6', '127.0.0.7']) {
      expect((await client(s, address).signIn('guess')).status).toBe(401);
    }
    const fresh = await client(s, '127.0.0.8').signIn(token);
    expect(fresh.status).toBe(429);
    // Before: locked out too, for as long as anyone sent wrong tokens.
    expect((await operator.signIn(token)).status).toBe(303);
    expect((await operator.bearer(token)).status).not.toBe(429);
  });

  it('are taken without end with tokenFailureLimit false', async () => {
    const s = await served({ tokenFailureLimit: false });
    const c = client(s, '127.0.0.9');
    for (let i = 0; i < 12; i++) expect((await c.signIn(`guess-${i}`)).status).toBe(401);
    expect((await c.signIn(token)).status).toBe(303);
  });

  it('refuses a limit that is no positive whole number, naming the field', () => {
    for (const [limit, field] of [
      [{ perClient: 0 }, 'perClient'],
      [{ total: 1.5 }, 'total'],
      [{ windowMs: -1 }, 'windowMs'],
      [{ windowMs: '60000' }, 'windowMs'],
    ] as const) {
      expect(() =>
        createDashboard({
          pool: db.pool,
          token,
          logger: silent,
          tokenFailureLimit: limit as never,
        }),
      ).toThrow(new RegExp(`tokenFailureLimit\\.${field} must be a whole number`));
    }
    expect(() =>
      createDashboard({ pool: db.pool, token, logger: silent, secureCookie: 'yes' as never }),
    ).toThrow(/secureCookie must be true, false or left out/);
  });

  it('count against an IPv6 client by its /64, an IPv4-mapped one by its IPv4 address', () => {
    expect(clientOf('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
    expect(clientOf('2001:db8:1:2:bbbb:cccc:dddd:eeee')).toBe('2001:db8:1:2::/64');
    expect(clientOf('2001:0db8::1')).toBe('2001:db8:0:0::/64');
    expect(clientOf('::1')).toBe('0:0:0:0::/64');
    expect(clientOf('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(clientOf('::ffff:10.1.2.3')).toBe('10.1.2.3');
    expect(clientOf('10.1.2.3')).toBe('10.1.2.3');
    expect(clientOf(undefined)).toBe('unknown');
  });
});

describe('the session cookie', () => {
  it('is Secure when the sign-in came from an https page (a proxy that ends TLS), not from http', async () => {
    const s = await served();
    const c = client(s, '127.0.0.10');
    const { port } = new URL(s.url);
    const overHttps = await c.signIn(token, `https://127.0.0.1:${port}`);
    expect(overHttps.status).toBe(303);
    expect(overHttps.setCookies[0]).toMatch(/; Secure$/);
    const overHttp = await c.signIn(token);
    expect(overHttp.setCookies[0]).not.toMatch(/Secure/);
  });

  it('is Secure or not as secureCookie says, whatever the page', async () => {
    const always = client(await served({ secureCookie: true }), '127.0.0.11');
    expect((await always.signIn(token)).setCookies[0]).toMatch(/; Secure$/);
    const never = await served({ secureCookie: false });
    const { port } = new URL(never.url);
    const c = client(never, '127.0.0.11');
    expect((await c.signIn(token, `https://127.0.0.1:${port}`)).setCookies[0]).not.toMatch(
      /Secure/,
    );
  });
});
