import type {
  AnySagaDefinition,
  SagaCounts,
  SagaList,
  SagaStatus,
  SagaView,
  StepRecord,
} from '@skiplock/saga';
import { sagaShape } from '@skiplock/saga';
import { showForBranch } from '../branch-redact.js';
import { sagaDiagram, type DiagramState } from '../diagram.js';
import { badge, clip, count, formatDuration, prettyJson, when } from '../format.js';
import { html, raw, type Html } from '../html.js';
import { actionForm, actionsHint, href, layout, type PageContext } from './layout.js';

export const sagaStatuses: readonly SagaStatus[] = [
  'running',
  'waiting',
  'compensating',
  'completed',
  'compensated',
  'cancelled',
  'failed',
  'queued',
];

/**
 * A status's count as shown: the saga's read counts one past its cap to know it was cut, so a
 * cut count shows as the cap, a lower bound ("10,000+"), as the queue's counts do.
 */
export function sagaCount(counts: SagaCounts, status: SagaStatus): string {
  const atLeast = counts.atLeast.includes(status);
  return count(
    atLeast ? Math.min(counts.counts[status], counts.cap) : counts.counts[status],
    atLeast,
  );
}

export interface SagaFilters {
  name?: string | undefined;
  version?: number | undefined;
  status?: SagaStatus | undefined;
  cursor?: string | undefined;
}

export function sagasPage(
  ctx: PageContext,
  filters: SagaFilters,
  list: SagaList,
  names: readonly string[],
  counts: SagaCounts,
) {
  const { cursor: _cursor, ...kept } = filters;
  const form = html`<form
    method="get"
    action="${href(ctx, '/sagas')}"
    class="filters"
    data-testid="saga-filters"
  >
    <label
      >definition
      <select name="name">
        <option value="">any</option>
        ${names.map((n) => html`<option value="${n}" ${n === filters.name ? raw(' selected') : ''}>${n}</option>`)}
      </select></label
    >
    <label
      >version
      <input name="version" type="number" min="1" value="${filters.version ?? ''}" size="4"
    /></label>
    <label
      >status
      <select name="status">
        <option value="">any</option>
        ${sagaStatuses.map((s) => html`<option value="${s}" ${s === filters.status ? raw(' selected') : ''}>${s}</option>`)}
      </select></label
    >
    <button type="submit">Filter</button>
    <a href="${href(ctx, '/sagas')}" class="reset">clear</a>
  </form>`;
  const chips = html`<div class="chips" data-live="saga-counts" data-testid="saga-counts">
    ${sagaStatuses.map(
      (s) =>
        html`<a
          class="chip chip-${s}${s === filters.status ? ' current' : ''}"
          href="${href(ctx, '/sagas', { ...kept, status: s })}"
          ><span class="n">${sagaCount(counts, s)}</span> ${s}</a
        >`,
    )}
  </div>`;
  // The read stopped at the sagas one page looks at, not at the oldest match: older ones may match.
  const searched = list.complete === false;
  const table =
    list.sagas.length === 0
      ? html`<p class="empty" data-testid="no-sagas">
          ${searched ? 'No match among the sagas searched so far.' : 'No sagas match.'}
        </p>`
      : html`<table class="grid" data-testid="sagas">
          <thead>
            <tr>
              <th>id</th>
              <th>definition</th>
              <th>status</th>
              <th>current</th>
              <th>created</th>
              <th>updated</th>
              <th>error</th>
            </tr>
          </thead>
          <tbody>
            ${list.sagas.map(
              (s) =>
                html`<tr data-saga-id="${s.id}" data-status="${s.status}">
                  <td>
                    <a href="${href(ctx, `/sagas/${encodeURIComponent(s.id)}`)}"
                      >${clip(s.id, 40)}</a
                    >
                  </td>
                  <td>${s.name} v${s.version}</td>
                  <td>${badge(s.status)}</td>
                  <td>
                    ${s.currentStep === null ? html`<span class="none">–</span>` : `${s.currentKind === 'compensation' ? 'undo ' : ''}${s.currentStep}`}
                  </td>
                  <td>${when(s.createdAt, ctx.now)}</td>
                  <td>${when(s.updatedAt, ctx.now)}</td>
                  <td class="error">${clip(s.error, 60)}</td>
                </tr>`,
            )}
          </tbody>
        </table>`;
  const paging = html`<nav class="paging" data-testid="paging">
    ${filters.cursor ? html`<a href="${href(ctx, '/sagas', kept)}">« newest</a>` : ''}
    ${list.nextCursor ? html`<a href="${href(ctx, '/sagas', { ...kept, cursor: list.nextCursor })}" data-testid="older">${searched ? `searched ${list.sagas.length === 0 ? '' : 'further '}without filling the page: search older »` : 'older »'}</a>` : ''}
  </nav>`;
  const body = html`<h1>Sagas</h1>
    ${form} ${chips}
    <section data-live="sagas">${table}</section>
    ${paging}`;
  return layout(ctx, 'sagas', 'Sagas', body);
}

/** Each node of the diagram's status in this saga, for colouring the drawing. */
function diagramState(def: AnySagaDefinition, saga: SagaView): DiagramState {
  const statuses: DiagramState['statuses'] = new Map();
  statuses.set('start', 'reached');
  for (const h of saga.history) {
    const step = def.steps.find((s) => s.name === h.step);
    if (step) statuses.set(`${h.kind === 'step' ? 's' : 'c'}${step.index}`, h.status);
  }
  if (saga.status === 'completed') statuses.set('done', 'completed');
  if (saga.status === 'compensated' || saga.status === 'cancelled') {
    statuses.set('compensated', 'completed');
  }
  const currentStep = def.steps.find((s) => s.name === saga.currentStep);
  const current =
    currentStep &&
    (saga.status === 'running' || saga.status === 'waiting' || saga.status === 'compensating')
      ? `${saga.currentKind === 'compensation' ? 'c' : 's'}${currentStep.index}`
      : null;
  return { statuses, current };
}

interface TimelineRow {
  kind: 'step' | 'compensation' | 'wait' | 'signal';
  name: string;
  status: string;
  attempts: number | null;
  start: Date;
  end: Date | null;
  error: string | null;
  jobId: string | null;
}

function timelineRows(saga: SagaView, def: AnySagaDefinition | null): TimelineRow[] {
  const isWait = (h: StepRecord) =>
    h.kind === 'step' &&
    (def?.steps.find((s) => s.name === h.step)?.wait != null || h.status === 'waiting');
  const rows: TimelineRow[] = saga.history.map((h) => ({
    kind: h.kind === 'compensation' ? 'compensation' : isWait(h) ? 'wait' : 'step',
    name: h.step,
    status: h.status,
    attempts: h.attempts,
    start: h.startedAt ?? h.createdAt,
    end: h.finishedAt,
    error: h.error,
    jobId: h.jobId,
  }));
  for (const s of saga.signals) {
    rows.push({
      kind: 'signal',
      name: s.name,
      status: s.consumedAt ? 'consumed' : 'received',
      attempts: null,
      start: s.receivedAt,
      end: s.consumedAt,
      error: null,
      jobId: null,
    });
  }
  return rows.sort((a, b) => a.start.getTime() - b.start.getTime());
}

/** A bar of the row's span within the saga's, for the timeline's last column. */
function spanBar(row: TimelineRow, from: number, to: number, now: number): Html {
  const total = Math.max(1, to - from);
  const start = row.start.getTime();
  const end = row.end?.getTime() ?? (row.kind === 'signal' ? start : now);
  const x = ((start - from) / total) * 200;
  const w = Math.max(2, ((end - start) / total) * 200);
  return html`<svg class="span" viewBox="0 0 204 12" width="204" height="12" aria-hidden="true">
    <rect class="span-bg" x="0" y="3" width="204" height="6" rx="3"></rect>
    <rect
      class="span-${row.kind} span-status-${row.status}"
      x="${x.toFixed(1)}"
      y="1"
      width="${w.toFixed(1)}"
      height="10"
      rx="3"
    ></rect>
  </svg>`;
}

export interface SagaPageOptions {
  def: AnySagaDefinition | null;
  /** Whether a runtime with this saga's definition is at hand for cancel and signal. */
  canRun: boolean;
  /** How to show the input, outputs and signal payloads: null hides them. */
  show: ((what: string, value: unknown) => unknown) | null;
  /** A parallel branch's: its parent's definition, when the dashboard was given it. */
  parentDef?: AnySagaDefinition | null;
  error?: string | undefined;
}

// A queued saga is live too: it can take signals (kept for its wait) and be cancelled.
const LIVE: readonly SagaStatus[] = ['queued', 'running', 'waiting', 'compensating'];

/**
 * A live saga on a job that can no longer move it (see `SagaView.stranded`): its timeline shows
 * the step pending (or waiting) while nothing will run it (or end the wait), so the page says
 * what does.
 */
function strandedNotice(saga: SagaView): Html | string {
  const s = saga.stranded;
  if (!s) return '';
  // A timeout job that no longer exists has no id the saga knows: it is named by its key.
  const name =
    s.kind === 'timeout'
      ? html`its wait's timeout job ${s.jobId ?? html`(key <code>${clip(s.key, 200)}</code>)`}`
      : html`job ${s.jobId}`;
  const job =
    s.status === 'missing'
      ? html`${name} no longer exists`
      : html`${name} is ${s.status}${s.lastError === null ? '' : html` (${clip(s.lastError, 200)})`}`;
  return html`<p class="notice bad" role="status" data-testid="saga-stranded">
    Stranded: ${job}; a saga runtime's reconciler moves it on (<code
      >skiplock sagas reconcile --module FILE</code
    >).
  </p>`;
}

export function sagaPage(ctx: PageContext, saga: SagaView, options: SagaPageOptions) {
  const { def, canRun } = options;
  const show = options.show && showForBranch(options.show, saga, options.parentDef ?? null);
  const rows = timelineRows(saga, def);
  const from = saga.createdAt.getTime();
  const to = (saga.finishedAt ?? new Date(ctx.now)).getTime();
  const waits = def?.steps.filter((s) => s.wait !== null).map((s) => s.wait!.signal) ?? [];
  const live = LIVE.includes(saga.status);
  const cancellable =
    canRun &&
    (saga.status === 'queued' || saga.status === 'running' || saga.status === 'waiting') &&
    !saga.pivoted;
  const signalForm =
    canRun && live && waits.length > 0 && ctx.mode === 'act'
      ? html`<form
          method="post"
          action="${href(ctx, `/sagas/${encodeURIComponent(saga.id)}/signal`)}"
          class="signal"
          data-testid="signal-form"
        >
          <input type="hidden" name="_csrf" value="${ctx.csrf ?? ''}" />
          <label
            >signal
            <select name="name">
              ${waits.map((w) => html`<option value="${w}">${w}</option>`)}
            </select></label
          >
          <label
            >payload (JSON)
            <textarea name="payload" rows="3" cols="40" spellcheck="false">{}</textarea>
          </label>
          <button type="submit" class="primary">Send signal</button>
        </form>`
      : html``;
  const failedStep = [...saga.history].reverse().find((h) => h.status === 'failed');
  const retriable =
    canRun &&
    saga.status === 'failed' &&
    failedStep !== undefined &&
    (failedStep.kind === 'compensation' || saga.pivoted);
  const actions = html`<div class="actions" data-testid="saga-actions">
    ${cancellable ? actionForm(ctx, `/sagas/${encodeURIComponent(saga.id)}/cancel`, 'Cancel saga', { danger: true, confirm: `Cancel saga ${saga.id}? Its completed steps will be compensated.` }) : ''}
    ${
      retriable
        ? actionForm(
            ctx,
            `/sagas/${encodeURIComponent(saga.id)}/retry`,
            `Retry ${failedStep.kind === 'compensation' ? 'undo ' : ''}${failedStep.step}`,
            {
              confirm:
                failedStep.kind === 'compensation'
                  ? `Run the undo of ${failedStep.step} of saga ${saga.id} again?`
                  : `Run ${failedStep.step} of saga ${saga.id} again?`,
            },
          )
        : ''
    }
  </div>`;
  const noRuntime =
    !canRun && live
      ? html`<p class="hint">
          To cancel or signal, give the dashboard this saga's definition (<code>sagas</code>, or
          <code>--module</code>).
        </p>`
      : html``;
  const field = (name: string, value: Html | string | null) =>
    html`<tr>
      <th>${name}</th>
      <td>${value === null ? html`<span class="none">–</span>` : value}</td>
    </tr>`;
  /** `alsoAs`: redacted as that first too (a wait's output is the signal it took). */
  const shown = (what: string, value: unknown, alsoAs?: string) =>
    show === null
      ? html`<span class="none">hidden</span>`
      : html`<code
          >${clip(JSON.stringify(show(what, alsoAs === undefined ? value : show(alsoAs, value))) ?? 'null', 120)}</code
        >`;
  const body = html`<h1>
      Saga <span class="mono">${saga.id}</span> <small>${saga.name} v${saga.version}</small>
    </h1>
    ${options.error ? html`<p class="notice bad" role="alert" data-testid="action-error">${options.error}</p>` : ''}
    <div data-live="saga-head" class="head-line">
      ${badge(saga.status)}
      ${saga.currentStep ? html`<span>${saga.currentKind === 'compensation' ? 'compensating' : 'at'} <strong>${saga.currentStep}</strong></span>` : ''}
      ${saga.pivoted ? html`<span class="tag">pivoted</span>` : ''}
      ${saga.cancelRequested ? html`<span class="tag">cancel requested</span>` : ''} ${actions}
    </div>
    <div data-live="saga-stranded">${strandedNotice(saga)}</div>
    ${live ? signalForm : ''} ${noRuntime} ${actionsHint(ctx)}
    <div class="columns">
      <section class="panel" data-live="saga-fields">
        <h2>Fields</h2>
        <table class="fields" data-testid="saga-fields">
          ${field('status', badge(saga.status))}
          ${field('definition', `${saga.name} v${saga.version}`)}
          ${field('current', saga.currentStep ? `${saga.currentKind === 'compensation' ? 'undo ' : ''}${saga.currentStep}` : null)}
          ${field('current job', saga.currentJobId ? html`<a href="${href(ctx, `/jobs/${saga.currentJobId}`)}">${saga.currentJobId}</a>` : null)}
          ${field('deadline', saga.deadline ? when(saga.deadline, ctx.now) : null)}
          ${field('parent', saga.parent ? html`<a href="${href(ctx, `/sagas/${encodeURIComponent(saga.parent.id)}`)}">${saga.parent.id}</a> (step ${saga.parent.step})` : null)}
          ${field('children', saga.children.length > 0 ? html`${saga.children.map((c, i) => html`${i > 0 ? ', ' : ''}<a href="${href(ctx, `/sagas/${encodeURIComponent(c.id)}`)}">${c.id}</a> ${badge(c.status)}`)}` : null)}
          ${field('lock key', saga.lockKey === null ? null : show === null ? html`<span class="none">hidden</span>` : lockKeyShown(saga, show))}
          ${field('created', when(saga.createdAt, ctx.now))}
          ${field('updated', when(saga.updatedAt, ctx.now))}
          ${field('finished', saga.finishedAt ? when(saga.finishedAt, ctx.now) : null)}
          ${field('took', saga.finishedAt ? formatDuration(saga.finishedAt.getTime() - from) : null)}
          ${field('error', saga.error ? html`<span class="error">${saga.error}</span>` : null)}
          ${field('input', show === null ? html`<span class="none">hidden</span>` : html`<pre class="json">${prettyJson(show(`saga:${saga.name}:input`, saga.input), 4_000)}</pre>`)}
        </table>
      </section>
      <section class="panel" data-live="saga-diagram">
        <h2>Definition</h2>
        ${def ? sagaDiagram(sagaShape(def), diagramState(def, saga)) : html`<p class="empty">The dashboard was not given the definition of ${saga.name} v${saga.version} (<code>sagas</code>, or <code>--module</code>), so it cannot draw it.</p>`}
      </section>
    </div>
    <section class="panel" data-live="saga-timeline">
      <h2>Timeline</h2>
      ${
        rows.length === 0
          ? html`<p class="empty">No steps yet.</p>`
          : html`<table class="grid timeline" data-testid="saga-timeline">
              <thead>
                <tr>
                  <th>kind</th>
                  <th>name</th>
                  <th>status</th>
                  <th class="num">attempts</th>
                  <th>started</th>
                  <th class="num">took</th>
                  <th>span</th>
                  <th>job</th>
                  <th>output or error</th>
                </tr>
              </thead>
              <tbody>
                ${rows.map(
                  (r) =>
                    html`<tr
                      class="row-${r.kind}"
                      data-kind="${r.kind}"
                      data-name="${r.name}"
                      data-status="${r.status}"
                    >
                      <td>${r.kind}</td>
                      <td>${r.kind === 'compensation' ? `undo ${r.name}` : r.name}</td>
                      <td>${badge(r.status)}</td>
                      <td class="num">${r.attempts ?? ''}</td>
                      <td>${when(r.start, ctx.now)}</td>
                      <td class="num">
                        ${r.end ? formatDuration(r.end.getTime() - r.start.getTime()) : r.kind === 'signal' ? '' : html`<span class="none">${formatDuration(ctx.now - r.start.getTime())} so far</span>`}
                      </td>
                      <td>${spanBar(r, from, to, ctx.now)}</td>
                      <td>
                        ${r.jobId ? html`<a href="${href(ctx, `/jobs/${r.jobId}`)}">${r.jobId}</a>` : ''}
                      </td>
                      <td class="error">
                        ${r.error ? clip(r.error, 90) : r.kind === 'signal' ? shown(`saga:${saga.name}:signal:${r.name}`, saga.signals.find((s) => s.name === r.name)?.payload) : outputOf(saga, def, r, shown)}
                      </td>
                    </tr>`,
                )}
              </tbody>
            </table>`
      }
    </section>`;
  return layout(ctx, 'sagas', `Saga ${saga.id}`, body);
}

/**
 * A saga's lock key, as `redact` lets it show. It is computed from the input, so it is shown as
 * it is only while the input is too: with the input redacted it showed what the input hid
 * (`customer:<email>`, found by an audit). Asked under `saga:<name>:lockKey` first; an answer
 * other than the key itself is shown instead.
 */
function lockKeyShown(
  saga: { name: string; lockKey: string | null; input: unknown },
  show: (what: string, value: unknown) => unknown,
): Html | string {
  const asked = show(`saga:${saga.name}:lockKey`, saga.lockKey);
  if (asked !== saga.lockKey)
    return typeof asked === 'string' ? asked : clip(JSON.stringify(asked) ?? 'null', 120);
  return show(`saga:${saga.name}:input`, saga.input) === saga.input
    ? (saga.lockKey ?? '')
    : html`<span class="none">hidden</span>`;
}

function outputOf(
  saga: SagaView,
  def: AnySagaDefinition | null,
  row: TimelineRow,
  shown: (what: string, value: unknown, alsoAs?: string) => Html,
): Html | string {
  if (row.kind !== 'step' && row.kind !== 'wait') return '';
  const record = saga.history.find((h) => h.kind === 'step' && h.step === row.name);
  if (!record || record.output === null || record.output === undefined) return '';
  // A wait step's output is the payload of the signal it took: redacted as that signal too, or a
  // redact that hides the signal's payload showed it here. Without the definition, a step named
  // as a signal the saga received (a wait's signal is its name unless given) is taken for its wait.
  const signal = def
    ? def.steps.find((s) => s.name === row.name)?.wait?.signal
    : saga.signals.find((s) => s.name === row.name)?.name;
  return shown(
    `saga:${saga.name}:${row.name}:output`,
    record.output,
    signal === undefined ? undefined : `saga:${saga.name}:signal:${signal}`,
  );
}
