import { isSagaJobType } from '@skiplock/saga';
import { isLeaseExpired, isStoppedRunLive, type Job, type JobStatus } from '@skiplock/queue';
import type { BrowsePage, JobSummary } from '@skiplock/queue/engine';
import { badge, clip, count, formatDuration, prettyJson, when } from '../format.js';
import { html, raw, type Html } from '../html.js';
import { actionForm, actionsHint, href, layout, type PageContext } from './layout.js';

export const jobStatuses: readonly JobStatus[] = [
  'pending',
  'processing',
  'retryable',
  'waiting',
  'completed',
  'dead',
  'cancelled',
];

export interface JobFilters {
  queue?: string | undefined;
  status?: JobStatus | undefined;
  type?: string | undefined;
  worker?: string | undefined;
  before?: string | undefined;
  /** What the lookup box held: a job id or an idempotency key. */
  lookup?: string | undefined;
}

function filterForm(ctx: PageContext, f: JobFilters): Html {
  return html`<form
      method="get"
      action="${href(ctx, '/jobs')}"
      class="filters"
      data-testid="job-filters"
    >
      <label>queue <input name="queue" value="${f.queue ?? ''}" size="12" /></label>
      <label
        >status
        <select name="status">
          <option value="">any</option>
          ${jobStatuses.map((s) => html`<option value="${s}" ${s === f.status ? raw(' selected') : ''}>${s}</option>`)}
        </select></label
      >
      <label>type <input name="type" value="${f.type ?? ''}" size="16" /></label>
      ${f.worker ? html`<input type="hidden" name="worker" value="${f.worker}" />` : ''}
      <button type="submit">Filter</button>
      <a href="${href(ctx, '/jobs')}" class="reset">clear</a>
    </form>
    <form method="get" action="${href(ctx, '/jobs')}" class="filters lookup">
      <label
        >id or idempotency key
        <input name="q" value="${f.lookup ?? ''}" size="28" data-testid="lookup"
      /></label>
      <button type="submit">Look up</button>
    </form>`;
}

/**
 * Whether a bulk action may take the job: a dead one, not a saga's step (bulk actions leave those
 * out, as they move only with their saga).
 */
const pickable = (j: JobSummary) => j.status === 'dead' && !isSagaJobType(j.jobType);

function jobRows(ctx: PageContext, jobs: readonly JobSummary[], selectable: boolean): Html {
  return html`${jobs.map(
    (j) =>
      html`<tr data-job-id="${j.id}" data-status="${j.status}">
        ${selectable ? html`<td>${pickable(j) ? html`<input type="checkbox" name="id" value="${j.id}" aria-label="select job ${j.id}" />` : ''}</td>` : ''}
        <td class="num"><a href="${href(ctx, `/jobs/${j.id}`)}">${j.id}</a></td>
        <td>${j.queue}</td>
        <td>${clip(j.jobType, 48)}</td>
        <td>${badge(j.status)}</td>
        <td class="num">${j.attempts}/${j.maxAttempts}</td>
        <td>${when(j.createdAt, ctx.now)}</td>
        <td>${when(j.updatedAt, ctx.now)}</td>
        <td class="error">${clip(j.lastError, 70)}</td>
      </tr>`,
  )}`;
}

export function jobsPage(
  ctx: PageContext,
  filters: JobFilters,
  page: BrowsePage,
  lookupResult: { none: boolean } | null,
) {
  const { before: _before, lookup: _lookup, ...kept } = filters;
  const selectable = ctx.mode === 'act' && page.jobs.some(pickable);
  const table =
    page.jobs.length === 0
      ? html`<p class="empty" data-testid="no-jobs">
          ${
            lookupResult?.none
              ? html`No job found by the id or idempotency key ${filters.lookup ?? ''} (keys hidden
                with their payloads are not searched).`
              : page.complete
                ? 'No jobs match.'
                : 'No match among the jobs searched so far.'
          }
        </p>`
      : html`<table class="grid" data-testid="jobs">
          <thead>
            <tr>
              ${selectable ? html`<th><input type="checkbox" data-select-all aria-label="select every dead job" /></th>` : ''}
              <th class="num">id</th>
              <th>queue</th>
              <th>type</th>
              <th>status</th>
              <th class="num">attempts</th>
              <th>created</th>
              <th>updated</th>
              <th>last error</th>
            </tr>
          </thead>
          <tbody>
            ${jobRows(ctx, page.jobs, selectable)}
          </tbody>
        </table>`;
  const bulk = selectable
    ? html`<div class="bulk">
        <input type="hidden" name="_csrf" value="${ctx.csrf ?? ''}" />
        <input type="hidden" name="return" value="${ctx.self}" />
        <button type="submit" name="action" value="retry" class="primary" data-testid="bulk-retry">
          Retry selected dead jobs
        </button>
        <button
          type="submit"
          name="action"
          value="discard"
          class="danger"
          data-confirm="Delete the selected dead jobs for good?"
          data-testid="bulk-discard"
        >
          Discard selected dead jobs
        </button>
      </div>`
    : html``;
  const paging = html`<nav class="paging" data-testid="paging">
    ${filters.before ? html`<a href="${href(ctx, '/jobs', kept)}">« newest</a>` : ''}
    ${
      page.nextBeforeId
        ? html`<a
            href="${href(ctx, '/jobs', { ...kept, before: page.nextBeforeId })}"
            data-testid="older"
            >${
              page.complete
                ? 'older »'
                : `searched ${page.jobs.length === 0 ? '' : 'further '}without filling the page: search older »`
            }</a
          >`
        : page.jobs.length > 0
          ? html`<span class="none">no older jobs</span>`
          : ''
    }
  </nav>`;
  const body = html`<h1>Jobs</h1>
    ${filterForm(ctx, filters)}
    ${filters.worker ? html`<p class="hint">Jobs that worker <code>${filters.worker}</code> holds or last ran.</p>` : ''}
    ${actionsHint(ctx)}
    <section data-live="jobs">
      ${
        selectable
          ? html`<form method="post" action="${href(ctx, '/jobs/bulk')}" class="bulk-form">
              ${table}${bulk}
            </form>`
          : table
      }
    </section>
    ${paging}`;
  return layout(ctx, 'jobs', 'Jobs', body);
}

/** A job's life, oldest first: created, each failed attempt, and how it ended. */
interface TimelineEntry {
  at: Date;
  event: string;
  attempt: number | null;
  reason: string | null;
  message: string | null;
}

function timeline(job: Job): TimelineEntry[] {
  const entries: TimelineEntry[] = [
    { at: job.createdAt, event: 'created', attempt: null, reason: null, message: null },
  ];
  for (const e of job.errors) {
    entries.push({
      at: new Date(e.at),
      event: 'attempt failed',
      attempt: e.attempt,
      reason: e.reason,
      message: e.message,
    });
  }
  if (job.status === 'processing' && job.lockedAt) {
    entries.push({
      at: job.lockedAt,
      event: 'attempt started',
      attempt: job.attempts,
      reason: null,
      message: null,
    });
  }
  if (job.completedAt) {
    entries.push({
      at: job.completedAt,
      event: 'completed',
      attempt: job.attempts,
      reason: null,
      message: null,
    });
  } else if (job.status === 'dead' || job.status === 'cancelled') {
    entries.push({
      at: job.updatedAt,
      event: job.status,
      attempt: null,
      reason: null,
      message: null,
    });
  }
  return entries.sort((a, b) => a.at.getTime() - b.at.getTime());
}

const RETRYABLE: readonly JobStatus[] = ['dead', 'cancelled', 'retryable', 'waiting'];
const CANCELLABLE: readonly JobStatus[] = ['pending', 'retryable', 'waiting'];

/**
 * What a waiting job waits behind: the jobs holding its key's slots, linked, each with its status
 * and queue (a holder in a queue no worker serves kept its key's waiting jobs for good, and the
 * page named neither it nor why: found in an audit). Ids and queues only, never their keys.
 */
function keyHolders(ctx: PageContext, job: Job, holders: readonly Job[]): Html {
  if (holders.length === 0) {
    // A delayed job of a key is stored waiting until it is due (found in review).
    return job.runAt.getTime() > ctx.now
      ? html`<span class="none"
          >not due until ${when(job.runAt, ctx.now)}; admitted then, while a slot is free</span
        >`
      : html`<span class="none"
          >no job holds a slot now: the next admission pass admits it (unless its key's rate limit
          holds it)</span
        >`;
  }
  return html`<ul class="holders" data-testid="key-holders">
    ${holders.map(
      (h) =>
        html`<li>
          <a href="${href(ctx, `/jobs/${h.id}`)}">job ${h.id}</a> ${badge(h.status)} in queue
          ${h.queue}${isLeaseExpired(h, ctx.now) ? ' (lease expired: its worker is gone or stuck)' : isStoppedRunLive(h, ctx.now) ? ' (stopped; its handler has not returned: holds the slot until it does or its lease ends)' : ''}
        </li>`,
    )}
  </ul>`;
}

/** The saga a job belongs to, from its idempotency key (`saga:<id>:...`), if it is a saga's job. */
export function sagaIdOfJob(job: Pick<Job, 'jobType' | 'idempotencyKey'>): string | null {
  if (!isSagaJobType(job.jobType) || !job.idempotencyKey?.startsWith('saga:')) return null;
  const encoded = job.idempotencyKey.split(':')[1];
  try {
    return encoded ? decodeURIComponent(encoded) : null;
  } catch {
    return null;
  }
}

/**
 * A job's page. `payload`: what `redact` left of the payload (`whole`: all of it), or null when
 * payloads are hidden. Its keys are often made from the payload (`tenant:<email>`), so they show
 * only while the whole payload does: they showed in full beside a hidden or redacted one (found
 * in review). A saga's job's idempotency key names its saga and step only, and always shows.
 */
export function jobPage(
  ctx: PageContext,
  job: Job,
  payload: { shown: unknown; whole: boolean } | null,
  holders: readonly Job[] | null = null,
) {
  const entries = timeline(job);
  const sagaId = sagaIdOfJob(job);
  const hidden = html`<span class="none">hidden</span>`;
  const key = (value: string | null, text: Html | string | null) =>
    value === null ? null : payload?.whole ? text : hidden;
  const field = (name: string, value: Html | string | number | null) =>
    html`<tr>
      <th>${name}</th>
      <td>${value === null ? html`<span class="none">–</span>` : value}</td>
    </tr>`;
  // A saga's job moves only with its saga: its actions are on the saga's page.
  const own = !isSagaJobType(job.jobType);
  // A run whose lease ran out (its worker gone or stuck, or an onDead hook that keeps failing)
  // may be retried or cancelled too; the database decides again when the form is sent.
  const expired = isLeaseExpired(job, ctx.now);
  const actions = html`<div class="actions" data-testid="job-actions">
    ${own && (expired || (RETRYABLE.includes(job.status) && !isStoppedRunLive(job, ctx.now))) ? actionForm(ctx, `/jobs/${job.id}/retry`, 'Retry now', {}) : ''}
    ${own && (expired || CANCELLABLE.includes(job.status)) ? actionForm(ctx, `/jobs/${job.id}/cancel`, 'Cancel', { danger: true, confirm: `Cancel job ${job.id}?` }) : ''}
    ${own && job.status === 'processing' && !expired ? actionForm(ctx, `/jobs/${job.id}/cancel`, 'Stop and cancel', { danger: true, confirm: `Stop job ${job.id}? Its worker aborts the handler.`, fields: html`<input type="hidden" name="running" value="1" />` }) : ''}
  </div>`;
  const body = html`<h1>Job ${job.id} <small>${job.jobType}</small></h1>
    <div data-live="job-head" class="head-line">
      ${badge(job.status)}
      <span>attempt ${job.attempts} of ${job.maxAttempts}</span>
      ${sagaId !== null ? html` · step of saga <a href="${href(ctx, `/sagas/${encodeURIComponent(sagaId)}`)}">${sagaId}</a>` : ''}
      ${actions}
    </div>
    ${actionsHint(ctx)}
    <div class="columns">
      <section class="panel" data-live="job-fields">
        <h2>Fields</h2>
        <table class="fields" data-testid="job-fields">
          ${field('status', isStoppedRunLive(job, ctx.now) ? html`${badge(job.status)} <span class="none">stopping: its handler has not returned; it holds its lease and slot until it does or the lease ends</span>` : badge(job.status))}
          ${field('queue', job.queue)} ${field('type', job.jobType)}
          ${field('priority', job.priority)} ${field('run at', when(job.runAt, ctx.now))}
          ${field('created', when(job.createdAt, ctx.now))}
          ${field('updated', when(job.updatedAt, ctx.now))}
          ${field('completed', job.completedAt ? when(job.completedAt, ctx.now) : null)}
          ${field('lease holder', job.lockedBy ? html`<a href="${href(ctx, '/jobs', { worker: job.lockedBy })}"><code>${job.lockedBy}</code></a>` : null)}
          ${field('locked at', job.lockedAt ? when(job.lockedAt, ctx.now) : null)}
          ${field('lease expires', job.leaseExpiresAt ? when(job.leaseExpiresAt, ctx.now) : null)}
          ${field('lease', `${formatDuration(job.leaseMs)}`)}
          ${field('timeout', job.timeoutMs === null ? null : formatDuration(job.timeoutMs))}
          ${field('idempotency key', sagaId !== null ? html`<code>${job.idempotencyKey}</code>` : key(job.idempotencyKey, html`<code>${job.idempotencyKey}</code>`))}
          ${field('concurrency key', key(job.concurrencyKey, `${job.concurrencyKey} (limit ${job.concurrencyLimit})`))}
          ${holders ? field('waits behind', keyHolders(ctx, job, holders)) : ''}
          ${field('singleton key', key(job.singletonKey, job.singletonKey))}
          ${field('last error', job.lastError ? html`<span class="error">${job.lastError}</span>` : null)}
        </table>
      </section>
      <section class="panel">
        <h2>Payload</h2>
        ${payload === null ? html`<p class="empty">Hidden (the dashboard runs with payloads hidden).</p>` : html`<pre class="json" data-testid="payload">${prettyJson(payload.shown)}</pre>`}
      </section>
    </div>
    <section class="panel" data-live="job-timeline">
      <h2>Attempts</h2>
      <table class="grid" data-testid="job-timeline">
        <thead>
          <tr>
            <th>at</th>
            <th>after</th>
            <th>event</th>
            <th class="num">attempt</th>
            <th>reason</th>
            <th>error</th>
          </tr>
        </thead>
        <tbody>
          ${entries.map((e, i) => {
            const previous = entries[i - 1];
            return html`<tr class="event-${e.event.replace(/\s+/g, '-')}">
              <td>${when(e.at, ctx.now)}</td>
              <td class="num">
                ${previous ? formatDuration(e.at.getTime() - previous.at.getTime()) : ''}
              </td>
              <td>${e.event}</td>
              <td class="num">${e.attempt ?? ''}</td>
              <td>${e.reason ?? ''}</td>
              <td class="error">${e.message ?? ''}</td>
            </tr>`;
          })}
        </tbody>
      </table>
      <p class="footnote">
        ${count(job.errors.length)} failed attempt${job.errors.length === 1 ? '' : 's'} recorded.
      </p>
    </section>`;
  return layout(ctx, 'jobs', `Job ${job.id}`, body);
}
