import { isIPv6 } from 'node:net';

/** How many wrong operator tokens the dashboard takes before it stops checking them for a while. */
export interface TokenFailureLimit {
  /** Wrong tokens from one client (an IPv4 address, an IPv6 /64) per window (default 10). */
  perClient?: number | undefined;
  /** Wrong tokens from all clients together per window (default 100). */
  total?: number | undefined;
  /** The window, from its first wrong token (default 15 minutes). */
  windowMs?: number | undefined;
}

export const DEFAULT_TOKEN_FAILURE_LIMIT = {
  perClient: 10,
  total: 100,
  windowMs: 15 * 60_000,
} as const;

/** Clients remembered at most: past it the oldest is forgotten (memory stays bounded). */
const MAX_CLIENTS = 10_000;
/** How long a client that gave the right token is spared the limit on everyone's wrong tokens. */
const TRUSTED_MS = 24 * 3_600_000;

interface Window {
  failures: number;
  endsAt: number;
}

/**
 * Counts wrong operator tokens (a sign-in's, a script's bearer) and says when to stop checking
 * them: the sign-in had no limit, so a short or guessable token could be tried without end
 * (noted in an audit). Past `perClient` wrong tokens from one client in a window, that client's
 * token checks are refused (429 with `Retry-After`) until the window ends, the right token too:
 * else a guess that hit would show. Past `total` from everyone (many addresses: an IPv6 attacker
 * has a /64 of them), every client's are, which keeps the token safe at the cost of signing in
 * for a while; reads and signed-in sessions go on. Clients that gave the right token in the last
 * day are spared that one: else anyone could keep every operator out by sending 100 wrong tokens
 * per window (found in review). Kept in memory per process.
 */
export class TokenThrottle {
  private readonly clients = new Map<string, Window>();
  /** Clients that gave the right token, and until when they are spared the total. */
  private readonly trusted = new Map<string, number>();
  private total: Window = { failures: 0, endsAt: 0 };
  private readonly perClient: number;
  private readonly totalLimit: number;
  private readonly windowMs: number;

  constructor(
    limit: TokenFailureLimit,
    private readonly now: () => number = Date.now,
  ) {
    this.perClient = limit.perClient ?? DEFAULT_TOKEN_FAILURE_LIMIT.perClient;
    this.totalLimit = limit.total ?? DEFAULT_TOKEN_FAILURE_LIMIT.total;
    this.windowMs = limit.windowMs ?? DEFAULT_TOKEN_FAILURE_LIMIT.windowMs;
  }

  /** Ms until `client` may have a token checked again; 0 when it may now. */
  blockedFor(client: string): number {
    const now = this.now();
    const own = this.current(client, now);
    const waits = [0];
    if (own && own.failures >= this.perClient) waits.push(own.endsAt - now);
    const spared = (this.trusted.get(client) ?? 0) > now;
    if (!spared && this.total.endsAt > now && this.total.failures >= this.totalLimit) {
      waits.push(this.total.endsAt - now);
    }
    return Math.max(...waits);
  }

  /** Counts a wrong token from `client`; true when that made it (or everyone) blocked. */
  failed(client: string): boolean {
    const now = this.now();
    let own = this.current(client, now);
    if (!own) {
      if (this.clients.size >= MAX_CLIENTS) {
        this.clients.delete(this.clients.keys().next().value!);
      }
      own = { failures: 0, endsAt: now + this.windowMs };
      this.clients.set(client, own);
    }
    own.failures += 1;
    if (this.total.endsAt <= now) this.total = { failures: 0, endsAt: now + this.windowMs };
    this.total.failures += 1;
    return own.failures === this.perClient || this.total.failures === this.totalLimit;
  }

  /** `client` gave the right token: spared the limit on everyone's wrong tokens for a day. */
  succeeded(client: string): void {
    this.trusted.delete(client);
    if (this.trusted.size >= MAX_CLIENTS) this.trusted.delete(this.trusted.keys().next().value!);
    this.trusted.set(client, this.now() + TRUSTED_MS);
  }

  /** The client's window while it lasts (an ended one is forgotten). */
  private current(client: string, now: number): Window | undefined {
    const own = this.clients.get(client);
    if (own && own.endsAt <= now) {
      this.clients.delete(client);
      return undefined;
    }
    return own;
  }
}

/**
 * Whom a request's wrong tokens count against: its IPv4 address (an IPv4-mapped IPv6 one as
 * IPv4), or the /64 of its IPv6 address, the block one host is usually given, so that walking
 * through its addresses does not reset the count.
 */
export function clientOf(address: string | undefined): string {
  if (!address) return 'unknown';
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return mapped[1]!;
  if (!isIPv6(address)) return address;
  const [head = '', tail = ''] = address.split('%')[0]!.toLowerCase().split('::');
  const front = head ? head.split(':') : [];
  const back = address.includes('::') && tail ? tail.split(':') : [];
  const groups = address.includes('::')
    ? [...front, ...Array<string>(8 - front.length - back.length).fill('0'), ...back]
    : front;
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}
