import { html, type Html } from '../html.js';

/** What every page needs to know about the request it answers. */
export interface PageContext {
  /** The mount path without a trailing slash ('' at the root). */
  base: string;
  now: number;
  /** The signed-in operator, or null. */
  operator: string | null;
  csrf: string | null;
  /**
   * `act`: signed in, actions shown; `signed-out`: a token is set, sign in to act; `read-only`:
   * started read-only, no actions; `no-token`: no token was given, so nothing can be changed.
   */
  mode: 'act' | 'signed-out' | 'read-only' | 'no-token';
  liveMs: number;
  /** This page's path and query under the mount path, for the sign-in's way back. */
  self: string;
  notice: Html | null;
}

/** A link under the mount path, with the query's empty values left out. */
export function href(
  ctx: PageContext,
  path: string,
  query: Record<string, string | number | null | undefined> = {},
): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== null && v !== '') params.set(k, String(v));
  }
  const qs = params.toString();
  return `${ctx.base}${path}${qs ? `?${qs}` : ''}`;
}

/**
 * A POST form for one action, with the CSRF token; `confirm` asks first (dashboard.js). Only shown
 * when the operator may act: otherwise a hint says how to get there.
 */
export function actionForm(
  ctx: PageContext,
  path: string,
  label: string,
  options: { confirm?: string; danger?: boolean; fields?: Html; name?: string } = {},
): Html {
  if (ctx.mode !== 'act') return html``;
  return html`<form
    method="post"
    action="${href(ctx, path)}"
    class="action"
    ${options.confirm ? html` data-confirm="${options.confirm}"` : ''}
  >
    <input type="hidden" name="_csrf" value="${ctx.csrf ?? ''}" />${options.fields ?? ''}
    <button
      type="submit"
      class="${options.danger ? 'danger' : 'primary'}"
      ${options.name ? html` name="${options.name}"` : ''}
    >
      ${label}
    </button>
  </form>`;
}

/** Why actions are missing, where a page would show them. */
export function actionsHint(ctx: PageContext): Html {
  switch (ctx.mode) {
    case 'act':
      return html``;
    case 'signed-out':
      return html`<p class="hint">
        <a href="${href(ctx, '/sign-in', { next: ctx.self })}">Sign in</a> with the operator token
        to retry, cancel, signal or pause.
      </p>`;
    case 'read-only':
      return html`<p class="hint">Read-only: this dashboard was started without actions.</p>`;
    case 'no-token':
      return html`<p class="hint">
        No operator token was set (<code>--token</code> or <code>SKIPLOCK_DASHBOARD_TOKEN</code>),
        so nothing can be changed here.
      </p>`;
  }
}

export type Section = 'overview' | 'jobs' | 'sagas' | 'outbox' | 'schedules' | 'sign-in';

export function layout(
  ctx: PageContext,
  section: Section,
  title: string,
  body: Html,
  options: { status?: number } = {},
): { status: number; body: Html } {
  const nav = (name: Section, label: string, path: string) =>
    html`<a
      href="${href(ctx, path)}"
      ${name === section ? html` class="current" aria-current="page"` : ''}
      >${label}</a
    >`;
  const who =
    ctx.operator !== null
      ? html`<span class="who">${ctx.operator}</span>
          <form method="post" action="${href(ctx, '/sign-out')}" class="inline">
            <input type="hidden" name="_csrf" value="${ctx.csrf ?? ''}" />
            <button type="submit" class="link">sign out</button>
          </form>`
      : ctx.mode === 'signed-out'
        ? html`<a href="${href(ctx, '/sign-in', { next: ctx.self })}">sign in</a>`
        : ctx.mode === 'read-only'
          ? html`<span class="who">read-only</span>`
          : html``;
  const page = html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>${title} · skiplock</title>
        <link rel="stylesheet" href="${href(ctx, '/assets/dashboard.css')}" />
        <script src="${href(ctx, '/assets/dashboard.js')}" defer></script>
      </head>
      <body data-live-ms="${ctx.liveMs}">
        <header class="top">
          <a class="brand" href="${href(ctx, '/')}">skiplock</a>
          <nav>
            ${nav('overview', 'Overview', '/')}${nav('jobs', 'Jobs', '/jobs')}${nav('sagas', 'Sagas', '/sagas')}${nav('outbox', 'Outbox', '/outbox')}${nav('schedules', 'Schedules', '/schedules')}
          </nav>
          <div class="session">${who}</div>
        </header>
        <main>${ctx.notice ?? ''} ${body}</main>
      </body>
    </html> `;
  return { status: options.status ?? 200, body: page };
}
