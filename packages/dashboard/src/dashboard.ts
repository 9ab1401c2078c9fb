import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  createClient,
  listSchedules,
  pauseSchedule,
  removeSchedule,
  resumeSchedule,
  SkiplockError,
  type Job,
  type Logger,
} from '@skiplock/queue';
import {
  browseJobs,
  createDefaultLogger,
  discardDeadJobs,
  findJobsByKey,
  isRowId,
  readQueueOverview,
  readRecentWorkers,
  readThroughput,
  resolvePool,
  retryDeadJobs,
  type BrowsePage,
} from '@skiplock/queue/engine';
import {
  ChildSagasError,
  createSagaRuntime,
  isSagaJobType,
  readSaga,
  readSagaCounts,
  readSagaNames,
  readSagas,
  SAGA_JOB_PREFIX,
  SagaError,
  type AnySagaDefinition,
  type SagaRuntime,
} from '@skiplock/saga';
import type pg from 'pg';
import { branchParentName } from './branch-redact.js';
import { createDatabaseClock } from './database-clock.js';
import { html, type Html } from './html.js';
import { jobPage, jobsPage, jobStatuses, sagaIdOfJob, type JobFilters } from './pages/jobs.js';
import type { PageContext } from './pages/layout.js';
import { messagePage, signInPage } from './pages/misc.js';
import { outboxPage } from './pages/outbox.js';
import { overviewPage, type OverviewData } from './pages/overview.js';
import { sagaPage, sagasPage, sagaStatuses, type SagaFilters } from './pages/sagas.js';
import { schedulesPage } from './pages/schedules.js';
import {
  clientOf,
  DEFAULT_TOKEN_FAILURE_LIMIT,
  TokenThrottle,
  type TokenFailureLimit,
} from './token-throttle.js';
import {
  bearerToken,
  cameOverHttps,
  Guard,
  isLoopback,
  NoticeSigner,
  operatorName,
  readCookies,
  sameOrigin,
  SESSION_COOKIE,
  type Session,
} from './security.js';

export interface DashboardOptions {
  /** The database: your pool, or a `connectionString` (default `$DATABASE_URL`) for a pool of its own. */
  pool?: pg.Pool | undefined;
  connectionString?: string | undefined;
  /** Where the handler is mounted, e.g. `/admin/skiplock` (default `/`). */
  basePath?: string | undefined;
  /**
   * The operator token that actions (retry, cancel, signal) need. Without one the dashboard
   * only reads. Use a long random string; it is never logged.
   */
  token?: string | null | undefined;
  /** Hide every action and refuse every change, whatever the token (default false). */
  readOnly?: boolean | undefined;
  /** Reading needs a signed-in session too, not only actions (needs a `token`; default false). */
  requireSignIn?: boolean | undefined;
  /**
   * Host names (as in the `Host` header, without the port) that may read without signing in,
   * beside the loopback ones (`localhost`, `127.x.x.x`, `::1`). Any other `Host` is refused unless
   * `requireSignIn` is on: a web page that rebinds its own domain to 127.0.0.1 (DNS rebinding)
   * must not be able to read payloads from a dashboard on the operator's machine.
   */
  allowedHosts?: readonly string[] | undefined;
  /**
   * Saga definitions (every version still in flight): the diagram of each saga, and what cancel
   * and signal need. Without them sagas are listed and shown, but not drawn, cancelled or signalled.
   */
  sagas?: readonly AnySagaDefinition[] | undefined;
  /**
   * What to show of a job's payload, a saga's input, a step's output or a signal's payload:
   * `what` is the job type, or `saga:<name>:input`, `saga:<name>:<step>:output`,
   * `saga:<name>:signal:<signal>` (a wait step's output is the signal it took: asked as that
   * signal first, then as the output). Default: all of it. It does not reach an outbox message's last
   * error (shown whole, or hidden with `hidePayloads`): payloads there are never shown.
   */
  redact?: ((what: string, value: unknown) => unknown) | undefined;
  /**
   * Show no payloads, inputs or outputs at all, nor an outbox message's last error, which may echo
   * the message (default false).
   */
  hidePayloads?: boolean | undefined;
  /** Mutations are logged here with the operator's name (default: JSON lines on stdout). */
  logger?: Logger | undefined;
  /** How often open pages refresh their counts and details (default 2,000 ms). */
  liveIntervalMs?: number | undefined;
  /**
   * Wrong operator tokens (a sign-in's or a bearer's) taken before token checks are refused for a
   * while (429): by default 10 per client (an IPv4 address, an IPv6 /64) and 100 from all clients
   * together per 15 minutes. `false` takes any number (when something in front limits them).
   * Behind a reverse proxy every client is the proxy's address: the per-client count is then
   * everyone's.
   */
  tokenFailureLimit?: TokenFailureLimit | false | undefined;
  /**
   * Whether the session cookie is marked `Secure` (sent over HTTPS only). Default: when the
   * sign-in came over TLS, or from an `https:` page (its `Origin`), as behind a proxy that ends TLS.
   */
  secureCookie?: boolean | undefined;
}

/** A request handler for `node:http` (and Express-style `next`), with `close()`. */
export interface Dashboard {
  (req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void): void;
  /** Ends the pool the dashboard made (not a pool you passed). */
  close(): Promise<void>;
}

const ASSETS: Record<string, string> = {
  'dashboard.css': 'text/css; charset=utf-8',
  'dashboard.js': 'text/javascript; charset=utf-8',
};

const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'same-origin',
};

const MAX_BODY_BYTES = 64 * 1024;
/** Counts on the outbox page stop here ("10,000+"): the page refreshes every few seconds. */
const OUTBOX_COUNT_CAP = 10_000;
const DEAD_MESSAGES_PER_PAGE = 50;
/** Topics the outbox page shows by name, the oldest pending first; the rest are summed. */
const OUTBOX_TOPICS_SHOWN = 20;

const NOTICES: Record<string, (n: number) => string> = {
  job_retried: () => 'Job retried: it runs again now.',
  job_retried_waiting: () =>
    'Job retried: it is waiting for a slot of its concurrency key (all are taken), then runs.',
  job_not_retried: () =>
    'Not retried: only dead, cancelled, retry-waiting and slot-waiting jobs can be, and running ones whose lease has expired; a stopped run must end (its handler return) first.',
  job_cancelled: () => 'Job cancelled.',
  job_not_cancelled: () =>
    'Not cancelled: only pending, retry-waiting and slot-waiting jobs can be, and running ones whose lease has expired.',
  job_not_stopped: () =>
    'Not stopped: the job is no longer running (it finished, or was stopped or taken back meanwhile).',
  bulk_retried: (n) => `${n} dead job${n === 1 ? '' : 's'} retried.`,
  bulk_discarded: (n) => `${n} dead job${n === 1 ? '' : 's'} discarded.`,
  bulk_retried_kept: (n) =>
    `${n} dead job${n === 1 ? '' : 's'} retried; the others were not dead any more, are saga steps (they move only with their saga), or were held by another transaction (try again).`,
  bulk_discarded_kept: (n) =>
    `${n} dead job${n === 1 ? '' : 's'} discarded; the others were not dead any more, are saga steps (they move only with their saga), or were held by another transaction (try again).`,
  outbox_retried: (n) => `${n} dead message${n === 1 ? '' : 's'} sent again.`,
  outbox_killed: () => "Message killed: it is dead now, and its key's next message goes on.",
  outbox_not_killed: () =>
    'Not killed: the message is no longer pending (delivered, dead or gone), or a relay is delivering it now.',
  outbox_kept: (n) =>
    `${n} dead message${n === 1 ? '' : 's'} sent again; the others were not dead any more, or stay dead while their key has a pending message (send them again once those settle).`,
  saga_cancel_accepted: () => 'Cancel accepted: the saga compensates its completed steps.',
  saga_cancel_stranded: () =>
    "Cancel recorded, but the saga is stranded: nothing moves it until a saga runtime's reconciler runs (skiplock sagas reconcile --module FILE); it then compensates its completed steps.",
  saga_cancel_finished: () => 'Not cancelled: the saga has finished.',
  saga_cancel_pivoted: () => 'Not cancelled: the saga is past its pivot.',
  saga_cancel_compensating: () => 'Not cancelled: the saga is compensating already.',
  saga_retried: () => 'Retried: the failed step runs again and the saga goes on from there.',
  saga_not_retried: () =>
    'Not retried: only a saga failed by a step past its pivot or by a compensation can be, while its dead job is kept.',
  saga_not_retried_not_failed: () => 'Not retried: the saga has not failed.',
  saga_not_retried_job_gone: () =>
    'Not retried: the dead job of the step that failed it is gone (retention removed it) or no longer dead.',
  saga_not_retried_invalid_signal: () =>
    "Not retried: the signal its wait took no longer passes the wait's schema (the definition changed without a new version).",
  saga_not_retried_lock_busy: () =>
    'Not retried: another saga of its definition holds its lock key now; retry once that one ends.',
  saga_not_retried_in_progress: () =>
    'Not retried: the child saga or branch whose undo failed is being retried now.',
  signal_resumed: () => 'Signal delivered: the waiting step took it and the saga moved on.',
  signal_stored: () => 'Signal stored: the wait step takes it when the saga gets there.',
  signal_duplicate: () => 'Ignored: a signal of that name was delivered before.',
  schedule_paused: () => 'Schedule paused: no worker enqueues its ticks until it is resumed.',
  schedule_resumed: () =>
    'Schedule resumed: ticks missed while it was paused follow its catchUp policy.',
  schedule_removed: () =>
    'Schedule removed: a scheduler that still defines it would record it again at its next pass.',
  signed_in: () => 'Signed in.',
  signed_out: () => 'Signed out.',
};
const BAD_NOTICES = new Set([
  'outbox_kept',
  'outbox_not_killed',
  'bulk_retried_kept',
  'bulk_discarded_kept',
  'job_not_retried',
  'job_not_cancelled',
  'job_not_stopped',
  'saga_cancel_stranded',
  'saga_cancel_finished',
  'saga_cancel_pivoted',
  'saga_cancel_compensating',
  'signal_duplicate',
  'saga_not_retried',
  'saga_not_retried_not_failed',
  'saga_not_retried_job_gone',
  'saga_not_retried_invalid_signal',
  'saga_not_retried_lock_busy',
  'saga_not_retried_in_progress',
]);

/** The notice of a refused saga retry: why, from `retryFailed`'s reason. */
function notRetried(reason: string | undefined): string {
  const notice = `saga_not_retried_${reason ?? ''}`;
  return Object.hasOwn(NOTICES, notice) ? notice : 'saga_not_retried';
}

const OUTBOX_NOT_INSTALLED = '@skiplock/outbox is not installed beside the dashboard.';
/** What `schedulesOrMissing` gives for a database whose schedules table is missing or older. */
const MISSING: unique symbol = Symbol('schedules missing');
const SCHEDULES_MISSING =
  "This database's schedules table is missing or older than this dashboard: apply @skiplock/queue's migrations.";
const NO_SAGA_TABLES =
  "The saga tables do not exist in this database: apply @skiplock/saga's migrations (its migrate(), or skiplock migrate) to use sagas.";

/**
 * A read of the saga's tables, refused with `status` and a clear message when they do not exist
 * (only the queue was migrated), as the overview says, instead of failing the page (500).
 */
function sagaRead<T>(read: Promise<T>, status: number): Promise<T> {
  return read.catch((error: unknown) => {
    if ((error as { code?: string }).code === '42P01') throw new HttpError(status, NO_SAGA_TABLES);
    throw error;
  });
}

type OutboxAdmin = Pick<
  typeof import('@skiplock/outbox'),
  'outboxCounts' | 'pendingByTopic' | 'deadMessages' | 'retryDeadMessages' | 'killPendingMessages'
>;

/**
 * `@skiplock/outbox` is an optional peer: only a project with an outbox installs it (and its
 * broker clients), and only the outbox page loads it. Null when it is not installed; any other
 * failure to load it (one of its own imports missing) is passed on.
 */
async function importOutbox(): Promise<OutboxAdmin | null> {
  try {
    return await import('@skiplock/outbox');
  } catch (error) {
    const { code, message } = error as { code?: unknown; message?: unknown };
    const missing = code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND';
    if (missing && typeof message === 'string' && message.includes("'@skiplock/outbox'")) {
      return null;
    }
    throw error;
  }
}

/**
 * A filter's value from the address: absent, or one of `allowed`. Anything else is refused, since
 * a list that ignored a misspelt filter would show every row as if they matched it.
 */
function oneOf<T extends string>(
  value: string | undefined,
  allowed: readonly T[],
  name: string,
): T | undefined {
  if (value === undefined || (allowed as readonly string[]).includes(value)) {
    return value as T | undefined;
  }
  throw new HttpError(
    400,
    `${name} must be one of ${allowed.join(', ')}, not "${value.slice(0, 40)}".`,
  );
}

/**
 * A job or message id from an address or a form, as PostgreSQL writes it (`007` is 7), or null
 * when it names no row: ids are `bigint`s from 1. The queue's and the outbox's own functions take
 * only this form, and refused `0` or `007` with an error that failed the page (500).
 */
function rowId(value: string): string | null {
  if (!isRowId(value)) return null;
  const id = BigInt(value);
  return id >= 1n ? String(id) : null;
}

/**
 * How long a job or saga action waits for a row (or a saga's lock key) another transaction holds,
 * then answers 409: the request waited as long as the holder did (found by an audit).
 */
const ACTION_LOCK_WAIT_MS = 5_000;

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

interface Request {
  req: IncomingMessage;
  res: ServerResponse;
  url: URL;
  segments: string[];
  session: Session | null;
  ctx: PageContext;
}

/** The `tokenFailureLimit` given, checked: each field a positive whole number. */
function checkedLimit(limit: TokenFailureLimit): TokenFailureLimit {
  if (typeof limit !== 'object' || limit === null) {
    throw new TypeError('createDashboard: tokenFailureLimit must be an object or false');
  }
  for (const field of ['perClient', 'total', 'windowMs'] as const) {
    const value = limit[field];
    if (value !== undefined && (!Number.isSafeInteger(value) || value < 1)) {
      throw new TypeError(
        `createDashboard: tokenFailureLimit.${field} must be a whole number from 1 (default ${DEFAULT_TOKEN_FAILURE_LIMIT[field]}), not ${String(value)}`,
      );
    }
  }
  return limit;
}

function normalizeBase(basePath: string | undefined): string {
  const base = (basePath ?? '/').replace(/\/+$/, '');
  if (base !== '' && !/^\/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*$/.test(base)) {
    throw new TypeError(`createDashboard: basePath must be a path such as /admin/skiplock`);
  }
  return base;
}

/**
 * The dashboard as a request handler: mount it in a `node:http` server (`createServer(dashboard)`)
 * or under a path of an existing one (`basePath`, and Express's `app.use(path, dashboard)`).
 */
export function createDashboard(options: DashboardOptions): Dashboard {
  const logger = options.logger ?? createDefaultLogger('skiplock-dashboard');
  const base = normalizeBase(options.basePath);
  const token = options.token ?? null;
  if (token !== null && (typeof token !== 'string' || token.length < 8)) {
    throw new TypeError('createDashboard: token must be a string of at least 8 characters');
  }
  if (options.requireSignIn && token === null) {
    throw new TypeError('createDashboard: requireSignIn needs a token to sign in with');
  }
  const readOnly = options.readOnly ?? false;
  const liveMs = options.liveIntervalMs ?? 2_000;
  const throttle =
    options.tokenFailureLimit === false
      ? null
      : new TokenThrottle(checkedLimit(options.tokenFailureLimit ?? {}));
  const secureCookie = options.secureCookie;
  if (secureCookie !== undefined && typeof secureCookie !== 'boolean') {
    throw new TypeError('createDashboard: secureCookie must be true, false or left out');
  }
  const allowedHosts = new Set((options.allowedHosts ?? []).map((h) => h.toLowerCase()));
  const guard = new Guard(token);
  const notices = new NoticeSigner();
  const owned = resolvePool(
    { pool: options.pool, connectionString: options.connectionString, maxConnections: 4 },
    logger,
    'dashboard',
  );
  const pool = owned.pool;
  const client = createClient({ pool, logger });
  const clock = createDatabaseClock(pool, logger);
  const definitions = new Map<string, AnySagaDefinition>();
  for (const def of options.sagas ?? []) definitions.set(`${def.name}@${def.version}`, def);
  const runtime: SagaRuntime | null =
    definitions.size > 0
      ? createSagaRuntime({ pool, client, logger, sagas: [...definitions.values()] })
      : null;
  const show: ((what: string, value: unknown) => unknown) | null = options.hidePayloads
    ? null
    : (options.redact ?? ((_what, value) => value));
  /**
   * Whether a job's page shows its keys: only beside its whole payload (see `jobPage`). A
   * `redact` that throws hides them.
   */
  const keysShown = (job: Job) => {
    try {
      return show !== null && show(job.jobType, job.payload) === job.payload;
    } catch {
      return false;
    }
  };
  let outboxModule: Promise<OutboxAdmin | null> | null = null;
  const loadOutbox = () => {
    outboxModule ??= importOutbox().catch((error: unknown) => {
      outboxModule = null; // not cached: the next request tries again
      throw error;
    });
    return outboxModule;
  };
  const assets = new Map<string, Buffer>();
  for (const name of Object.keys(ASSETS)) {
    assets.set(name, readFileSync(new URL(`../assets/${name}`, import.meta.url)));
  }

  function send(
    res: ServerResponse,
    status: number,
    type: string,
    body: string | Buffer,
    headers: Record<string, string> = {},
  ) {
    res.writeHead(status, {
      ...SECURITY_HEADERS,
      'content-type': type,
      'cache-control': 'no-store',
      ...headers,
    });
    res.end(body);
  }

  function page(r: Request, result: { status: number; body: Html }) {
    send(r.res, result.status, 'text/html; charset=utf-8', result.body.text);
  }

  function redirect(res: ServerResponse, location: string, headers: Record<string, string> = {}) {
    res.writeHead(303, { ...SECURITY_HEADERS, location, 'cache-control': 'no-store', ...headers });
    res.end();
  }

  function noticeOf(url: URL): Html | null {
    const signed = notices.read(url.searchParams, url.pathname);
    const code = signed?.notice;
    // Own keys only: `?notice=__proto__` found Object.prototype, not a function, and the call
    // threw outside the page's error handling (the connection was dropped, no answer).
    const make = code && Object.hasOwn(NOTICES, code) ? NOTICES[code] : undefined;
    if (!code || !make) return null;
    const n = signed.n;
    return html`<p
      class="notice ${BAD_NOTICES.has(code) ? 'bad' : 'good'}"
      role="status"
      data-testid="notice"
    >
      ${make(Number.isSafeInteger(n) ? n : 0)}
    </p>`;
  }

  function hostAllowed(host: string | undefined): boolean {
    if (!host) return false;
    let name: string;
    try {
      name = new URL(`http://${host}`).hostname.replace(/^\[|\]$/g, '').toLowerCase();
    } catch {
      return false;
    }
    return isLoopback(name) || allowedHosts.has(name);
  }

  /** A path under the mount point to come back to, from a form: nothing else is followed. */
  function localPath(value: unknown, fallback: string): string {
    if (typeof value !== 'string' || !value.startsWith('/') || value.includes('\\')) {
      return fallback;
    }
    // Judged after normalising, as the redirect will be: `/.//evil.com` becomes `//evil.com`.
    let url: URL;
    try {
      url = new URL(value, 'http://dashboard');
    } catch {
      return fallback;
    }
    const path = url.pathname;
    if (url.origin !== 'http://dashboard' || path.startsWith('//')) return fallback;
    if (base !== '' && path !== base && !path.startsWith(`${base}/`)) return fallback;
    return `${path}${url.search}`;
  }

  async function readForm(req: IncomingMessage): Promise<URLSearchParams> {
    // Behind Express's urlencoded parser the body was read already: take what it parsed.
    const parsed = (req as { body?: unknown }).body;
    if (parsed !== null && typeof parsed === 'object' && !Buffer.isBuffer(parsed)) {
      const form = new URLSearchParams();
      for (const [key, value] of Object.entries(parsed as Record<string, unknown>)) {
        for (const v of Array.isArray(value) ? value : [value]) {
          if (typeof v === 'string') form.append(key, v);
        }
      }
      return form;
    }
    const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (type !== 'application/x-www-form-urlencoded') {
      throw new HttpError(415, 'Send the form as application/x-www-form-urlencoded.');
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) throw new HttpError(413, 'The form is too large.');
      chunks.push(chunk);
    }
    return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
  }

  /**
   * Who may change something, or null after refusing (and logging) the request: read-only, no
   * token set, no valid session or bearer token, or a CSRF or cross-origin failure.
   */
  function authorize(r: Request, form: URLSearchParams, action: string): string | null {
    const refuse = (status: number, reason: string, message: string) => {
      logger.warn({ reason, action, operator: r.session?.operator ?? null }, message);
      page(r, messagePage(r.ctx, status, 'Refused', message));
      return null;
    };
    if (readOnly) {
      return refuse(403, 'dashboard_read_only_refused', 'This dashboard is read-only.');
    }
    if (!guard.hasToken) {
      return refuse(
        403,
        'dashboard_token_refused',
        'No operator token was set, so nothing can be changed here.',
      );
    }
    // A signed-in browser's request goes by its session, whatever Authorization header an
    // authenticating proxy in front adds: taken for a wrong operator token, the proxy's bearer
    // failed every action and soon throttled every client behind the proxy (found by an audit).
    const bearer = r.session === null ? bearerToken(r.req) : null;
    if (bearer !== null) {
      const header = r.req.headers['x-skiplock-operator'];
      const named = operatorName(Array.isArray(header) ? header[0] : header);
      const operator = named !== null && guard.tokenMatches(named) ? null : named;
      if (throttled(r)) return null;
      if (guard.tokenMatches(bearer)) {
        throttle?.succeeded(clientKey(r));
      } else {
        tokenFailed(r, 'bearer');
        return refuse(
          401,
          'dashboard_token_refused',
          'The bearer token is not the operator token.',
        );
      }
      if (operator === null) {
        return refuse(
          400,
          'dashboard_token_refused',
          'Name yourself in X-Skiplock-Operator (your name, not the token).',
        );
      }
      return operator;
    }
    if (r.session === null) {
      return refuse(
        401,
        'dashboard_token_refused',
        'Sign in with the operator token to change anything.',
      );
    }
    if (!sameOrigin(r.req) || !guard.csrfMatches(r.session, form.get('_csrf'))) {
      return refuse(
        403,
        'dashboard_csrf_refused',
        'The form did not come from this dashboard (CSRF check failed); reload the page and try again.',
      );
    }
    return r.session.operator;
  }

  /**
   * Signs out: clears the session cookie. Only from the dashboard's own pages: a page on another
   * site that posted here had its answer's cookie taken on the top-level navigation (the
   * `SameSite=Strict` cookie is not sent, but a `Set-Cookie` back is kept), so it signed the
   * operator out, unlogged (found in an audit). A cookie that is no longer a session (expired,
   * or signed with another token) is cleared from the dashboard's own pages without a CSRF token.
   */
  async function signOut(r: Request) {
    const form = await readForm(r.req);
    if (!sameOrigin(r.req) || (r.session && !guard.csrfMatches(r.session, form.get('_csrf')))) {
      const message =
        'The sign-out did not come from this dashboard (CSRF check failed); reload the page and try again.';
      logger.warn(
        {
          reason: 'dashboard_csrf_refused',
          action: 'sign_out',
          operator: r.session?.operator ?? null,
        },
        message,
      );
      return page(r, messagePage(r.ctx, 403, 'Refused', message));
    }
    if (r.session) {
      logger.info(
        { reason: 'dashboard_sign_out', operator: r.session.operator },
        'operator signed out',
      );
    }
    return redirect(r.res, withNotice(`${base}/`, 'signed_out'), {
      'set-cookie': cookie(r.req, '', 0),
    });
  }

  async function overviewData(): Promise<OverviewData> {
    const [overview, throughput, workers, sagas] = await Promise.all([
      readQueueOverview(pool),
      readThroughput(pool),
      readRecentWorkers(pool),
      readSagaCounts(pool).catch((error: unknown) => {
        if ((error as { code?: string }).code === '42P01') return null; // no saga tables
        throw error;
      }),
    ]);
    return { overview, throughput, workers, sagas };
  }

  async function jobsList(r: Request) {
    const q = r.url.searchParams;
    const text = (name: string) => q.get(name)?.trim() || undefined;
    const before = text('before');
    const filters: JobFilters = {
      queue: text('queue'),
      status: oneOf(text('status'), jobStatuses, 'status'),
      type: text('type'),
      worker: text('worker'),
      before: before === undefined ? undefined : (rowId(before) ?? undefined),
      lookup: text('q'),
    };
    if (before !== undefined && filters.before === undefined) {
      throw new HttpError(400, 'before must be a job id.');
    }
    if (filters.lookup !== undefined) {
      const jobs: Job[] = [];
      // Digits past the bigint range are no job's id, but may be an idempotency key.
      const asId = rowId(filters.lookup);
      const byId = asId === null ? null : await client.getJob(asId);
      if (byId) jobs.push(byId);
      const keyed = (await findJobsByKey(pool, filters.lookup)).filter((id) => id !== asId);
      for (const job of await Promise.all(keyed.slice(0, 100).map((id) => client.getJob(id)))) {
        // Found by its key only where its page shows the key: a lookup confirmed a key made from
        // a hidden or redacted payload (`signup:<email>`) by landing on its job (found by an
        // audit). A saga's job's key names its saga and step only, and always shows.
        if (job && (sagaIdOfJob(job) !== null || keysShown(job))) jobs.push(job);
      }
      if (jobs.length === 1) return redirect(r.res, `${base}/jobs/${jobs[0]!.id}`);
      const page_: BrowsePage = {
        jobs: jobs.map(({ payload: _p, errors: _e, ...summary }) => summary),
        nextBeforeId: null,
        complete: true,
      };
      return page(r, jobsPage(r.ctx, filters, page_, { none: jobs.length === 0 }));
    }
    const result = await browseJobs(pool, {
      statuses: filters.status ? [filters.status] : undefined,
      queue: filters.queue,
      jobType: filters.type,
      workerId: filters.worker,
      beforeId: filters.before,
      limit: 50,
    });
    page(r, jobsPage(r.ctx, filters, result, null));
  }

  async function jobDetail(r: Request, given: string) {
    const id = rowId(given);
    if (id === null) throw new HttpError(404, `No job ${given}.`);
    const job = await client.getJob(id);
    if (!job) throw new HttpError(404, `Job ${id} does not exist (retention may have removed it).`);
    const shown = show === null ? null : show(job.jobType, job.payload);
    const holders =
      job.status === 'waiting' && job.concurrencyKey !== null
        ? await client.listJobs({
            concurrencyKey: job.concurrencyKey,
            holdingSlot: true,
            limit: 20,
          })
        : null;
    page(
      r,
      jobPage(r.ctx, job, show === null ? null : { shown, whole: shown === job.payload }, holders),
    );
  }

  async function outboxView(r: Request) {
    const given = r.url.searchParams.get('before')?.trim() || undefined;
    const before = given === undefined ? undefined : (rowId(given) ?? undefined);
    if (given !== undefined && before === undefined) {
      throw new HttpError(400, 'before must be a message id.');
    }
    const outbox = await loadOutbox();
    if (outbox === null) return page(r, outboxPage(r.ctx, { missing: 'package' }));
    let counts;
    try {
      counts = await outbox.outboxCounts(pool, { cap: OUTBOX_COUNT_CAP });
    } catch (error) {
      if ((error as { code?: string }).code !== '42P01') throw error;
      return page(r, outboxPage(r.ctx, { missing: 'table' }));
    }
    const byTopic = await outbox.pendingByTopic(pool, {
      cap: OUTBOX_COUNT_CAP,
      limit: OUTBOX_TOPICS_SHOWN,
    });
    // One more than a page, to know whether an older page exists.
    const dead = await outbox.deadMessages(pool, {
      limit: DEAD_MESSAGES_PER_PAGE + 1,
      beforeId: before,
    });
    const more = dead.length > DEAD_MESSAGES_PER_PAGE;
    const shown = dead.slice(0, DEAD_MESSAGES_PER_PAGE);
    page(
      r,
      outboxPage(r.ctx, {
        missing: null,
        counts,
        byTopic,
        dead: shown,
        nextBeforeId: more ? shown[shown.length - 1]!.id : null,
        before,
        showErrors: show !== null,
      }),
    );
  }

  async function outboxRetry(r: Request) {
    const form = await readForm(r.req);
    const operator = authorize(r, form, 'outbox_retry');
    if (operator === null) return;
    const asked = form.getAll('id');
    const bad = asked.find((id) => rowId(id) === null);
    if (bad !== undefined) throw new HttpError(400, `"${bad.slice(0, 40)}" is not a message id.`);
    const ids = [...new Set(asked.map((id) => rowId(id)!))];
    if (ids.length > 500) throw new HttpError(400, 'At most 500 messages at a time.');
    const outbox = await loadOutbox();
    if (outbox === null) throw new HttpError(409, OUTBOX_NOT_INSTALLED);
    const revived = await outbox.retryDeadMessages(pool, ids).catch((error: unknown) => {
      if ((error as { code?: string }).code === '42P01') {
        throw new HttpError(409, 'This database has no outbox table.');
      }
      throw error;
    });
    logger.info(
      { reason: 'dashboard_outbox_retry', operator, requested: ids.length, messageIds: revived },
      'dead outbox messages sent again by an operator',
    );
    const back = localPath(form.get('return'), `${base}/outbox`);
    redirect(
      r.res,
      withNotice(
        back,
        revived.length === ids.length ? 'outbox_retried' : 'outbox_kept',
        revived.length,
      ),
    );
  }

  /** Kills one pending message (a topic's oldest, from the pending-by-topic table). */
  async function outboxKill(r: Request) {
    const form = await readForm(r.req);
    const operator = authorize(r, form, 'outbox_kill');
    if (operator === null) return;
    const given = form.get('id') ?? '';
    const id = rowId(given);
    if (id === null) throw new HttpError(400, `"${given.slice(0, 40)}" is not a message id.`);
    const reason = (form.get('reason') ?? '').trim();
    if (reason.length > 400) throw new HttpError(400, 'The reason is longer than 400 characters.');
    const outbox = await loadOutbox();
    if (outbox === null) throw new HttpError(409, OUTBOX_NOT_INSTALLED);
    const killed = await outbox
      .killPendingMessages(pool, [id], {
        reason: reason ? `${reason} (${operator})` : `by ${operator}`,
      })
      .catch((error: unknown) => {
        if ((error as { code?: string }).code === '42P01') {
          throw new HttpError(409, 'This database has no outbox table.');
        }
        throw error;
      });
    logger.info(
      {
        reason: 'dashboard_outbox_kill',
        operator,
        messageId: id,
        killed: killed.length === 1,
      },
      'a pending outbox message killed by an operator',
    );
    const back = localPath(form.get('return'), `${base}/outbox`);
    redirect(
      r.res,
      withNotice(back, killed.length === 1 ? 'outbox_killed' : 'outbox_not_killed', 1),
    );
  }

  /**
   * Pause, resume, or remove one that no scheduler runs (`removeSchedule` without force: the page
   * offers it for a `not seen` schedule only, and one a scheduler marked since is refused, 409).
   */
  async function scheduleAction(r: Request, action: 'pause' | 'resume' | 'remove') {
    const form = await readForm(r.req);
    const operator = authorize(r, form, `schedule_${action}`);
    if (operator === null) return;
    const name = form.get('schedule');
    if (!name) throw new HttpError(400, 'Name the schedule (the form field schedule).');
    const change = {
      pause: () => pauseSchedule(pool, name),
      resume: () => resumeSchedule(pool, name),
      remove: () => removeSchedule(pool, name),
    }[action];
    const not = { pause: 'Not paused', resume: 'Not resumed', remove: 'Not removed' }[action];
    const state = await schedulesOrMissing(
      change().catch((error: unknown) => {
        // A pass stalled before its commit holds the row (all three), or the schedule is in use.
        const busy = ['schedule_in_use', 'schedule_busy'];
        if (error instanceof SkiplockError && busy.includes(error.code)) {
          throw new HttpError(409, `${not}: ${error.message}.`);
        }
        throw error;
      }),
    );
    if (state === MISSING) throw new HttpError(409, SCHEDULES_MISSING);
    if (state === null) throw new HttpError(404, `No schedule ${name.slice(0, 80)}.`);
    const done = { pause: 'paused', resume: 'resumed', remove: 'removed' }[action];
    logger.info(
      { reason: `dashboard_schedule_${action}`, operator, schedule: state.name },
      `schedule ${done} by an operator`,
    );
    redirect(r.res, withNotice(`${base}/schedules`, `schedule_${done}`));
  }

  /**
   * `read`, or MISSING when the schedules table or its columns are missing:
   * a database migrated by an older version (42P01 undefined table, 42703 undefined column).
   */
  async function schedulesOrMissing<T>(read: Promise<T>): Promise<T | typeof MISSING> {
    try {
      return await read;
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code === '42P01' || code === '42703') return MISSING;
      throw error;
    }
  }

  async function sagasList(r: Request) {
    const q = r.url.searchParams;
    const text = (name: string) => q.get(name)?.trim() || undefined;
    const version = text('version');
    if (version !== undefined && !/^[1-9][0-9]{0,8}$/.test(version)) {
      throw new HttpError(
        400,
        `version must be a whole number from 1, not "${version.slice(0, 40)}".`,
      );
    }
    const filters: SagaFilters = {
      name: text('name'),
      version: version === undefined ? undefined : Number(version),
      status: oneOf(text('status'), sagaStatuses, 'status'),
      cursor: text('cursor'),
    };
    const [list, names, counts] = await sagaRead(
      Promise.all([
        readSagas(pool, {
          status: filters.status,
          name: filters.name,
          version: filters.version,
          cursor: filters.cursor,
          limit: 50,
        }).catch((error: unknown) => {
          if (error instanceof SagaError && error.code === 'invalid_cursor') {
            throw new HttpError(400, 'That page cursor is not one this dashboard made.');
          }
          throw error;
        }),
        readSagaNames(pool),
        readSagaCounts(pool),
      ]),
      404,
    );
    page(r, sagasPage(r.ctx, filters, list, names, counts));
  }

  async function sagaDetail(r: Request, id: string, error?: string, status = 200) {
    const saga = await sagaRead(readSaga(pool, id), 404);
    if (!saga) throw new HttpError(404, `Saga ${id} does not exist.`);
    const def = definitions.get(`${saga.name}@${saga.version}`) ?? null;
    const parentName = branchParentName(saga);
    const result = sagaPage(r.ctx, saga, {
      def,
      canRun: runtime !== null && def !== null,
      show,
      parentDef:
        parentName === null ? null : (definitions.get(`${parentName}@${saga.version}`) ?? null),
      error,
    });
    page(r, { ...result, status });
  }

  async function signIn(r: Request) {
    const form = await readForm(r.req);
    const next = localPath(form.get('next'), `${base}/`);
    const named = operatorName(form.get('operator'));
    // The token typed as the name (the two fields swapped, or filled alike): it would be logged,
    // shown back, and signed in as the operator's name on every log line and page (found by an
    // audit).
    const operator = named !== null && guard.tokenMatches(named) ? null : named;
    if (!sameOrigin(r.req)) {
      logger.warn(
        { reason: 'dashboard_csrf_refused', action: 'sign_in' },
        'sign-in from another origin',
      );
      return page(
        r,
        messagePage(r.ctx, 403, 'Refused', 'The sign-in form did not come from this dashboard.'),
      );
    }
    if (!guard.hasToken) {
      return page(
        r,
        messagePage(
          r.ctx,
          403,
          'Refused',
          'No operator token was set, so there is nothing to sign in to.',
        ),
      );
    }
    if (throttled(r)) return;
    const tokenMatches = guard.tokenMatches(form.get('token'));
    if (!tokenMatches) tokenFailed(r, 'sign_in');
    else throttle?.succeeded(clientKey(r));
    if (operator === null || !tokenMatches) {
      // No name: a refused sign-in's name field may hold the token, mistyped or swapped.
      logger.warn(
        { reason: 'dashboard_sign_in_refused', named: operator !== null },
        operator === null ? 'sign-in without a name' : 'sign-in with a wrong token',
      );
      return page(
        r,
        signInPage(r.ctx, next, {
          error:
            named !== null && operator === null
              ? 'That name is the operator token: give your own name, and the token below it.'
              : operator === null
                ? 'Give your name (1 to 64 characters).'
                : 'That is not the operator token.',
          operator: '',
          status: 401,
        }),
      );
    }
    const { value } = guard.newSession(operator);
    logger.info({ reason: 'dashboard_sign_in', operator }, 'operator signed in');
    redirect(r.res, withNotice(next, 'signed_in'), { 'set-cookie': cookie(r.req, value, 43_200) });
  }

  /** Whom the request's token checks count against (see `clientOf`). */
  function clientKey(r: Request): string {
    return clientOf(r.req.socket.remoteAddress);
  }

  /**
   * Refuses (429) a token check from a client past its wrong tokens (see `TokenThrottle`); true
   * when it did.
   */
  function throttled(r: Request): boolean {
    const waitMs = throttle?.blockedFor(clientKey(r)) ?? 0;
    if (waitMs <= 0) return false;
    const seconds = Math.ceil(waitMs / 1000);
    r.res.setHeader('retry-after', String(seconds));
    page(
      r,
      messagePage(
        r.ctx,
        429,
        'Too many wrong tokens',
        `Too many wrong operator tokens were tried; try again in ${Math.ceil(seconds / 60)} min.`,
      ),
    );
    // Logged once, when the limit is reached (see tokenFailed), not per refused request.
    return true;
  }

  function tokenFailed(r: Request, action: string): void {
    // Not `client`: that is the queue's client here.
    const who = clientKey(r);
    if (throttle?.failed(who)) {
      logger.warn(
        { reason: 'dashboard_token_throttled', action, client: who },
        'too many wrong operator tokens: token checks refused for a while',
      );
    }
  }

  function cookie(req: IncomingMessage, value: string, maxAgeSeconds: number): string {
    const secure = (secureCookie ?? cameOverHttps(req)) ? '; Secure' : '';
    return `${SESSION_COOKIE}=${value}; Path=${base || '/'}; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSeconds}${secure}`;
  }

  function withNotice(path: string, notice: string, n?: number): string {
    const url = new URL(path, 'http://dashboard');
    for (const name of ['notice', 'n', 't', 'sig']) url.searchParams.delete(name);
    for (const [name, value] of notices.params(notice, n, url.pathname)) {
      url.searchParams.set(name, value);
    }
    return `${url.pathname}${url.search}`;
  }

  async function jobAction(r: Request, given: string, action: 'retry' | 'cancel') {
    const form = await readForm(r.req);
    const operator = authorize(r, form, `job_${action}`);
    if (operator === null) return;
    const id = rowId(given);
    if (id === null) throw new HttpError(404, `No job ${given}.`);
    const job = await client.getJob(id);
    // A saga's step or compensation job moves only with its saga: retried or cancelled on its own,
    // it would run against a saga that no longer expects it and strand the saga.
    if (job && isSagaJobType(job.jobType)) {
      throw new HttpError(409, 'This job is a saga step: act on its saga instead.');
    }
    // A running job is cancelled only from the form its own page showed while it ran: a page read
    // while the job still waited must not stop it once it has started.
    // Waits at most ACTION_LOCK_WAIT_MS for a row another transaction holds (a job inside its
    // completeWith).
    const lockWaitMs = ACTION_LOCK_WAIT_MS;
    const changed = await (
      action === 'retry'
        ? client.retryJob(id, { lockWaitMs })
        : client.cancelJob(id, { running: form.get('running') === '1', lockWaitMs })
    ).catch((error: unknown) => {
      if (error instanceof SkiplockError && error.code === 'job_busy') {
        throw new HttpError(
          409,
          `Not ${action === 'retry' ? 'retried' : 'cancelled'}: ${error.message}.`,
        );
      }
      throw error;
    });
    logger.info(
      { reason: `dashboard_job_${action}`, operator, jobId: id, changed },
      changed
        ? `job ${action === 'retry' ? 'retried' : 'cancelled'} by an operator`
        : `job ${action} refused`,
    );
    // A retried job whose concurrency key has every slot taken waits for one: it does not run now.
    const retried = action === 'retry' && changed ? await client.getJob(id) : null;
    const done =
      action === 'cancel'
        ? 'job_cancelled'
        : retried?.status === 'waiting'
          ? 'job_retried_waiting'
          : 'job_retried';
    const not =
      action === 'retry'
        ? 'job_not_retried'
        : form.get('running') === '1'
          ? 'job_not_stopped'
          : 'job_not_cancelled';
    redirect(r.res, withNotice(`${base}/jobs/${id}`, changed ? done : not));
  }

  async function bulkAction(r: Request) {
    const form = await readForm(r.req);
    const action = form.get('action');
    const operator = authorize(r, form, `jobs_bulk_${action}`);
    if (operator === null) return;
    if (action !== 'retry' && action !== 'discard')
      throw new HttpError(400, 'Unknown bulk action.');
    // Refused by name, as the outbox's bulk retry does: dropped, a bad id was reported as done.
    const asked = form.getAll('id');
    const bad = asked.find((id) => rowId(id) === null);
    if (bad !== undefined) throw new HttpError(400, `"${bad.slice(0, 40)}" is not a job id.`);
    const ids = [...new Set(asked.map((id) => rowId(id)!))];
    if (ids.length > 500) throw new HttpError(400, 'At most 500 jobs at a time.');
    // Saga step jobs are left out: they move only with their saga (retry it on its page).
    const except = { exceptTypePrefix: SAGA_JOB_PREFIX };
    const done =
      action === 'retry'
        ? await retryDeadJobs(pool, ids, { ...except, logger })
        : await discardDeadJobs(pool, ids, except);
    logger.info(
      { reason: `dashboard_jobs_bulk_${action}`, operator, requested: ids.length, jobIds: done },
      `dead jobs ${action === 'retry' ? 'retried' : 'discarded'} by an operator`,
    );
    const back = localPath(form.get('return'), `${base}/jobs?status=dead`);
    const notice = action === 'retry' ? 'bulk_retried' : 'bulk_discarded';
    redirect(
      r.res,
      withNotice(back, done.length === ids.length ? notice : `${notice}_kept`, done.length),
    );
  }

  async function sagaAction(r: Request, id: string, action: 'cancel' | 'signal' | 'retry') {
    const form = await readForm(r.req);
    const operator = authorize(r, form, `saga_${action}`);
    if (operator === null) return;
    const saga = await sagaRead(readSaga(pool, id), 409);
    if (!saga) throw new HttpError(404, `Saga ${id} does not exist.`);
    if (runtime === null || !definitions.has(`${saga.name}@${saga.version}`)) {
      throw new HttpError(
        409,
        `The dashboard was not given the definition of ${saga.name} v${saga.version}, which ${action} needs.`,
      );
    }
    const path = `${base}/sagas/${encodeURIComponent(id)}`;
    if (action !== 'signal') {
      try {
        return await (action === 'cancel'
          ? cancelSaga(r, runtime, operator, id, path)
          : retrySaga(r, runtime, operator, id, path));
      } catch (error) {
        if (error instanceof ChildSagasError) {
          // The parent's cancel or retry took effect; some of its children's threw: said so,
          // and logged as done with the children left (found in review: it read "refused").
          const left = (error.children as { sagaId: string }[]).map((c) => c.sagaId);
          logger.warn(
            action === 'cancel'
              ? {
                  reason: 'dashboard_saga_cancel',
                  operator,
                  sagaId: id,
                  accepted: true,
                  childrenNotCancelled: left,
                }
              : {
                  reason: 'dashboard_saga_retry',
                  operator,
                  sagaId: id,
                  retried: false,
                  childrenNotRetried: left,
                },
            action === 'cancel'
              ? 'saga cancelled by an operator, some children not'
              : 'saga retried by an operator, some children not',
          );
          return sagaDetail(
            r,
            id,
            `${action === 'cancel' ? 'Cancel recorded' : 'Retry ran'}, but not for every child: ${error.message}`,
            409,
          );
        }
        // A refusal the runtime throws (a step the definition lacks): shown on the saga's page
        // with its reason, not on a bare error page.
        if (!(error instanceof SagaError)) throw error;
        logger.warn(
          { reason: `dashboard_saga_${action}`, operator, sagaId: id, refused: error.code },
          `saga ${action} refused`,
        );
        return sagaDetail(
          r,
          id,
          `${action === 'cancel' ? 'Cancel' : 'Retry'} refused: ${error.message}`,
          409,
        );
      }
    }
    return signalSaga(r, runtime, operator, id, path, form);
  }

  async function cancelSaga(
    r: Request,
    runtime: SagaRuntime,
    operator: string,
    id: string,
    path: string,
  ) {
    const result = await runtime.cancel(id, { lockWaitMs: ACTION_LOCK_WAIT_MS });
    // A stranded saga (its job died where no saga hook ran) keeps the cancel until a reconciler
    // moves it: the notice must not say it compensates now (found in an audit).
    const stranded = result.accepted && (await runtime.getSaga(id))?.stranded != null;
    logger.info(
      {
        reason: 'dashboard_saga_cancel',
        operator,
        sagaId: id,
        accepted: result.accepted,
        refusal: result.reason ?? null,
      },
      result.accepted ? 'saga cancelled by an operator' : 'saga cancel refused',
    );
    return redirect(
      r.res,
      withNotice(
        path,
        stranded
          ? 'saga_cancel_stranded'
          : result.accepted
            ? 'saga_cancel_accepted'
            : `saga_cancel_${result.reason ?? 'finished'}`,
      ),
    );
  }

  async function retrySaga(
    r: Request,
    runtime: SagaRuntime,
    operator: string,
    id: string,
    path: string,
  ) {
    const result = await runtime.retryFailed(id, { lockWaitMs: ACTION_LOCK_WAIT_MS });
    logger.info(
      {
        reason: 'dashboard_saga_retry',
        operator,
        sagaId: id,
        retried: result.retried,
        step: result.step ?? null,
        kind: result.kind ?? null,
        refusal: result.reason ?? null,
      },
      result.retried ? 'failed saga retried by an operator' : 'saga retry refused',
    );
    return redirect(
      r.res,
      withNotice(path, result.retried ? 'saga_retried' : notRetried(result.reason)),
    );
  }

  async function signalSaga(
    r: Request,
    runtime: SagaRuntime,
    operator: string,
    id: string,
    path: string,
    form: URLSearchParams,
  ) {
    const name = form.get('name') ?? '';
    let payload: unknown;
    try {
      payload = JSON.parse(form.get('payload') || 'null');
    } catch {
      return sagaDetail(r, id, 'The signal payload is not JSON.', 422);
    }
    try {
      const result = await runtime.signal(id, name, payload, { lockWaitMs: ACTION_LOCK_WAIT_MS });
      logger.info(
        { reason: 'dashboard_saga_signal', operator, sagaId: id, signal: name, ...result },
        'signal sent by an operator',
      );
      const notice = !result.delivered
        ? 'signal_duplicate'
        : result.resumed
          ? 'signal_resumed'
          : 'signal_stored';
      redirect(r.res, withNotice(path, notice));
    } catch (error) {
      if (!(error instanceof SagaError)) throw error;
      logger.warn(
        {
          reason: 'dashboard_saga_signal',
          operator,
          sagaId: id,
          signal: name,
          refused: error.code,
        },
        'signal refused',
      );
      // A held saga (saga_busy) is a conflict to try again, not a bad signal.
      const status = error.code === 'saga_busy' ? 409 : 422;
      return sagaDetail(r, id, `Signal refused: ${error.message}`, status);
    }
  }

  async function route(r: Request): Promise<void> {
    const { req, segments } = r;
    const [first, second, third, ...rest] = segments;
    const method = req.method ?? 'GET';
    if (method === 'GET' || method === 'HEAD') {
      if (first === 'assets' && second && assets.has(second) && third === undefined) {
        return send(r.res, 200, ASSETS[second]!, assets.get(second)!, {
          'cache-control': 'public, max-age=300',
        });
      }
      if (first === 'sign-in' && second === undefined) {
        return page(r, signInPage(r.ctx, localPath(r.url.searchParams.get('next'), `${base}/`)));
      }
      if (options.requireSignIn && r.session === null) {
        return redirect(r.res, `${base}/sign-in?next=${encodeURIComponent(r.ctx.self)}`);
      }
      if (first === '' && second === undefined)
        return page(r, overviewPage(r.ctx, await overviewData()));
      if (first === 'api' && second === 'overview' && third === undefined) {
        return send(
          r.res,
          200,
          'application/json; charset=utf-8',
          JSON.stringify(await overviewData()),
        );
      }
      if (first === 'jobs' && second === undefined) return jobsList(r);
      if (first === 'jobs' && second !== undefined && third === undefined)
        return jobDetail(r, second);
      if (first === 'outbox' && second === undefined) return outboxView(r);
      if (first === 'schedules' && second === undefined) {
        const list = await schedulesOrMissing(listSchedules(pool));
        return page(r, schedulesPage(r.ctx, list === MISSING ? null : list));
      }
      if (first === 'sagas' && second === undefined) return sagasList(r);
      if (first === 'sagas' && second !== undefined && third === undefined)
        return sagaDetail(r, second);
      throw new HttpError(404, 'There is no such page.');
    }
    if (method !== 'POST') throw new HttpError(405, 'Only GET and POST are answered here.');
    if (first === 'sign-in' && second === undefined) return signIn(r);
    if (first === 'sign-out' && second === undefined) return signOut(r);
    if (first === 'jobs' && second === 'bulk' && third === undefined) return bulkAction(r);
    if (first === 'outbox' && second === 'retry' && third === undefined) return outboxRetry(r);
    if (first === 'outbox' && second === 'kill' && third === undefined) return outboxKill(r);
    if (
      first === 'schedules' &&
      (second === 'pause' || second === 'resume' || second === 'remove') &&
      !third
    ) {
      return scheduleAction(r, second);
    }
    if (
      first === 'jobs' &&
      second &&
      (third === 'retry' || third === 'cancel') &&
      rest.length === 0
    ) {
      return jobAction(r, second, third);
    }
    if (
      first === 'sagas' &&
      second &&
      (third === 'cancel' || third === 'signal' || third === 'retry') &&
      rest.length === 0
    ) {
      return sagaAction(r, second, third);
    }
    throw new HttpError(404, 'There is no such action.');
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<boolean> {
    const target = (req as { originalUrl?: string }).originalUrl ?? req.url ?? '/';
    // A path is read as a path: resolved against a base, `//` (a host with no name) threw outside
    // the page's error handling and the connection was dropped unanswered, and `//x/jobs` was
    // read as host x, path /jobs.
    let url: URL;
    try {
      url = target.startsWith('/')
        ? new URL(`http://dashboard${target}`)
        : new URL(target, 'http://dashboard');
    } catch {
      send(res, 400, 'text/plain; charset=utf-8', 'The address is not valid.\n');
      return true;
    }
    const path = url.pathname;
    if (base !== '' && path !== base && !path.startsWith(`${base}/`)) return false;
    if (!options.requireSignIn && !hostAllowed(req.headers.host)) {
      logger.warn({ reason: 'dashboard_host_refused' }, 'request for a host name not allowed');
      res.writeHead(421, { 'content-type': 'text/plain; charset=utf-8' });
      res.end(
        'This dashboard reads without sign-in only on loopback host names (or allowedHosts).',
      );
      return true;
    }
    // The first value that is a session of this dashboard's (see readCookies).
    let session: Session | null = null;
    for (const value of readCookies(req).get(SESSION_COOKIE) ?? []) {
      session = guard.readSession(value);
      if (session) break;
    }
    const mode: PageContext['mode'] = readOnly
      ? 'read-only'
      : !guard.hasToken
        ? 'no-token'
        : session
          ? 'act'
          : 'signed-out';
    const kept = new URLSearchParams(url.searchParams);
    for (const name of ['notice', 'n', 't', 'sig']) kept.delete(name);
    const ctx: PageContext = {
      base,
      now: await clock(),
      operator: session?.operator ?? null,
      csrf: session ? guard.csrfToken(session) : null,
      mode,
      liveMs,
      self: `${path}${kept.size > 0 ? `?${kept.toString()}` : ''}`,
      notice: noticeOf(url),
    };
    const r: Request = { req, res, url, segments: [], session, ctx };
    try {
      r.segments = (path.slice(base.length) || '/')
        .split('/')
        .slice(1)
        .map((s) => decodeURIComponent(s));
      // PostgreSQL text cannot hold a NUL: a saga id, lookup or filter with one names nothing, and
      // sent on to the database it failed the page (500).
      if ([...r.segments, ...url.searchParams.values()].some((v) => v.includes('\0'))) {
        throw new HttpError(400, 'The address holds a NUL character: it names nothing here.');
      }
      await route(r);
    } catch (error) {
      if (res.headersSent) {
        res.destroy();
        return true;
      }
      if (error instanceof HttpError) {
        page(
          r,
          messagePage(
            ctx,
            error.status,
            error.status === 404 ? 'Not found' : 'Cannot do that',
            error.message,
          ),
        );
      } else if (error instanceof URIError) {
        page(r, messagePage(ctx, 400, 'Bad address', 'The address is not valid.'));
      } else if (error instanceof SkiplockError || error instanceof SagaError) {
        page(r, messagePage(ctx, 400, 'Cannot do that', error.message));
      } else {
        logger.error(
          { reason: 'dashboard_error', path, err: (error as Error)?.message ?? String(error) },
          'dashboard request failed',
        );
        page(
          r,
          messagePage(
            ctx,
            500,
            'Something failed',
            'The dashboard could not answer; its log says why.',
          ),
        );
      }
    }
    return true;
  }

  const dashboard = ((req, res, next) => {
    handle(req, res).then(
      (handled) => {
        if (handled) return;
        if (next) return next();
        res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' });
        res.end('not found\n');
      },
      (error: unknown) => {
        if (next) return next(error);
        res.destroy();
      },
    );
  }) as Dashboard;
  dashboard.close = async () => {
    await runtime?.close();
    await client.close();
    await owned.release();
  };
  return dashboard;
}
