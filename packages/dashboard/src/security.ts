import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

// The security model (README, "Security"):
// - Reading is open to whoever reaches the handler (bind it to loopback), unless `requireSignIn`.
// - Changing anything takes the operator token. A browser signs in once with the token and a
//   name; it gets a session cookie (HttpOnly, SameSite=Strict) signed with a key derived from the
//   token, so a new token ends every session and no session state is kept on the server.
// - Each form carries a CSRF token derived from the session (HMAC), checked on every POST, and a
//   POST whose Origin is not this host is refused: a page on another site can neither read the
//   token nor send a form that passes.
// - Scripts may instead send `Authorization: Bearer <token>` and `X-Skiplock-Operator: <name>`;
//   browsers never add that header on their own, so no CSRF token is needed there.
// - Wrong tokens are counted per client and in all, and past a limit token checks are refused
//   for a while (`TokenThrottle`).

export const SESSION_COOKIE = 'skiplock_dashboard';
const SESSION_MS = 12 * 3_600_000;
const OPERATOR = /^[^\p{Cc}]{1,64}$/u;

export interface Session {
  operator: string;
  /** Random per sign-in; the CSRF token is derived from it. */
  nonce: string;
  expiresAt: number;
}

const digest = (text: string) => createHash('sha256').update(text, 'utf8').digest();

/** A valid operator name: 1 to 64 characters, no control characters, trimmed. */
export function operatorName(value: unknown): string | null {
  if (typeof value !== 'string') return null;
  const name = value.trim();
  return OPERATOR.test(name) ? name : null;
}

export class Guard {
  private readonly key: Buffer | null;
  private readonly tokenDigest: Buffer | null;

  constructor(token: string | null) {
    this.tokenDigest = token === null ? null : digest(token);
    this.key = token === null ? null : createHmac('sha256', token).update('session-key').digest();
  }

  /** Whether a token was configured at all (without one, nothing can be changed). */
  get hasToken(): boolean {
    return this.tokenDigest !== null;
  }

  /** Constant-time comparison of digests, so timing says nothing of the token. */
  tokenMatches(given: unknown): boolean {
    if (this.tokenDigest === null || typeof given !== 'string' || given.length === 0) return false;
    return timingSafeEqual(digest(given), this.tokenDigest);
  }

  private sign(text: string): string {
    return createHmac('sha256', this.key!).update(text).digest('base64url');
  }

  /** A new session's cookie value for `operator`. */
  newSession(operator: string, now = Date.now()): { value: string; session: Session } {
    const session = {
      operator,
      nonce: randomBytes(16).toString('base64url'),
      expiresAt: now + SESSION_MS,
    };
    const body = Buffer.from(JSON.stringify(session), 'utf8').toString('base64url');
    return { value: `${body}.${this.sign(body)}`, session };
  }

  /** The session a cookie value proves, or null (forged, expired, or made under another token). */
  readSession(value: string | undefined, now = Date.now()): Session | null {
    if (this.key === null || !value) return null;
    const dot = value.indexOf('.');
    if (dot < 1) return null;
    const body = value.slice(0, dot);
    const mac = Buffer.from(value.slice(dot + 1), 'base64url');
    const expected = Buffer.from(this.sign(body), 'base64url');
    if (mac.length !== expected.length || !timingSafeEqual(mac, expected)) return null;
    try {
      const session = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as Session;
      if (typeof session.expiresAt !== 'number' || session.expiresAt < now) return null;
      if (operatorName(session.operator) === null || typeof session.nonce !== 'string') return null;
      return session;
    } catch {
      return null;
    }
  }

  /** The CSRF token of a session: forms carry it, POSTs must return it. */
  csrfToken(session: Session): string {
    return this.sign(`csrf:${session.nonce}`);
  }

  csrfMatches(session: Session, given: unknown): boolean {
    if (typeof given !== 'string') return false;
    const a = Buffer.from(given);
    const b = Buffer.from(this.csrfToken(session));
    return a.length === b.length && timingSafeEqual(a, b);
  }
}

/**
 * The request's cookies, by name, each name's values in the order sent. A browser sends every
 * cookie whose path matches, the most specific path first: a dashboard mounted at `/staging`
 * beside one at `/` gets both one's session and the other's under the same name, and keeping only
 * the last one signed its operator out for good (found in an audit).
 */
export function readCookies(req: IncomingMessage): Map<string, string[]> {
  const cookies = new Map<string, string[]>();
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq < 1) continue;
    const name = part.slice(0, eq).trim();
    try {
      const value = decodeURIComponent(part.slice(eq + 1).trim());
      const values = cookies.get(name);
      if (values) values.push(value);
      else cookies.set(name, [value]);
    } catch {
      // A cookie that is not ours and not URI-encoded: ignored.
    }
  }
  return cookies;
}

/**
 * False when the request names an origin (Origin, or failing that Referer) other than the host it
 * was sent to: a form posted from another site. Browsers send Origin on every POST.
 */
export function sameOrigin(req: IncomingMessage): boolean {
  const claimed = req.headers.origin ?? req.headers.referer;
  if (!claimed) return false;
  try {
    return new URL(claimed).host === req.headers.host;
  } catch {
    return false;
  }
}

/**
 * Whether the request came over HTTPS: its own socket is TLS, or the page it came from (Origin,
 * or failing that Referer; a sign-in and a sign-out need one) is an `https:` page, as behind a
 * proxy that ends TLS. Decides the session cookie's `Secure` flag: behind such a proxy the
 * cookie had none, and a browser sent it over plain HTTP too (noted in an audit).
 */
export function cameOverHttps(req: IncomingMessage): boolean {
  if ((req.socket as { encrypted?: boolean }).encrypted) return true;
  const claimed = req.headers.origin ?? req.headers.referer;
  if (!claimed) return false;
  try {
    return new URL(claimed).protocol === 'https:';
  } catch {
    return false;
  }
}

/** The bearer token of an Authorization header, if any. */
export function bearerToken(req: IncomingMessage): string | null {
  const header = req.headers.authorization;
  const match = header ? /^Bearer\s+(\S+)$/i.exec(header) : null;
  return match ? match[1]! : null;
}

/** Whether a host name or address is the local machine's loopback (what `--host` may default to). */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** How long the link a finished action redirects to shows its notice. */
const NOTICE_MINUTES = 10;

/**
 * Signs the notice a finished action's redirect shows ("Job retried: it runs again now."), so
 * that only the dashboard's own redirects show one: any `?notice=` in an address was shown, so a
 * crafted link made a dead job's page say it was retried, or counted "-25000 dead jobs
 * discarded" (found in an audit). The signature covers the page's path, the notice, its count
 * and the minute it was made; after `NOTICE_MINUTES` it is not shown. The key is made at start,
 * never from the operator token: a sign-out needs no session, so anyone got a signature over a
 * known text from the token's key and could test guesses of the token offline, past the
 * wrong-token limit (found in review: a 4-digit PIN in milliseconds). So a notice made by
 * another process (a second replica, or before a restart) is not shown: it only decorates a page.
 */
export class NoticeSigner {
  private readonly key = randomBytes(32);

  /** `notice`, `n` and when, with their signature for the page at `path`, as query parameters. */
  params(
    notice: string,
    n: number | undefined,
    path: string,
    now = Date.now(),
  ): [string, string][] {
    const t = String(Math.floor(now / 60_000));
    const count = n === undefined ? '' : String(n);
    const out: [string, string][] = [['notice', notice]];
    if (count) out.push(['n', count]);
    out.push(['t', t], ['sig', this.sign(path, notice, count, t)]);
    return out;
  }

  /** The notice and its count the address of the page at `path` carries, when signed lately. */
  read(
    query: URLSearchParams,
    path: string,
    now = Date.now(),
  ): { notice: string; n: number } | null {
    const notice = query.get('notice');
    const count = query.get('n') ?? '';
    const t = query.get('t') ?? '';
    const sig = query.get('sig');
    if (!notice || !sig || !/^\d{1,12}$/.test(t) || !/^(\d{1,15})?$/.test(count)) return null;
    const age = Math.floor(now / 60_000) - Number(t);
    if (age < 0 || age > NOTICE_MINUTES) return null;
    const given = Buffer.from(sig);
    const expected = Buffer.from(this.sign(path, notice, count, t));
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
    return { notice, n: count ? Number(count) : 0 };
  }

  private sign(path: string, notice: string, count: string, t: string): string {
    return createHmac('sha256', this.key)
      .update(`notice\n${path}\n${notice}\n${count}\n${t}`)
      .digest('base64url')
      .slice(0, 22);
  }
}
