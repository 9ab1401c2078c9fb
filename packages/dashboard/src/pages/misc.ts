import { html } from '../html.js';
import { href, layout, type PageContext } from './layout.js';

export function signInPage(
  ctx: PageContext,
  next: string,
  options: { error?: string; operator?: string; status?: number } = {},
) {
  const body = html`<h1>Sign in</h1>
    <p>
      Actions (retry, cancel, signal) need the operator token the dashboard was started with. Your
      name goes into the log line of everything you do.
    </p>
    ${options.error ? html`<p class="notice bad" role="alert" data-testid="sign-in-error">${options.error}</p>` : ''}
    <form method="post" action="${href(ctx, '/sign-in')}" class="sign-in" data-testid="sign-in">
      <input type="hidden" name="next" value="${next}" />
      <label
        >your name
        <input
          name="operator"
          required
          maxlength="64"
          autocomplete="username"
          value="${options.operator ?? ''}"
      /></label>
      <label
        >operator token
        <input name="token" type="password" required autocomplete="current-password"
      /></label>
      <button type="submit" class="primary">Sign in</button>
    </form>`;
  return layout(ctx, 'sign-in', 'Sign in', body, { status: options.status ?? 200 });
}

export function messagePage(ctx: PageContext, status: number, title: string, message: string) {
  const body = html`<h1>${title}</h1>
    <p class="notice ${status >= 400 ? 'bad' : ''}" role="alert" data-testid="message">
      ${message}
    </p>
    <p><a href="${href(ctx, '/')}">Overview</a></p>`;
  return layout(ctx, 'overview', title, body, { status });
}
