import type { JobStatus } from '@skiplock/queue';
import type { QueueCounts, QueueOverview, RecentWorker, Throughput } from '@skiplock/queue/engine';
import type { SagaCounts } from '@skiplock/saga';
import { throughputChart } from '../chart.js';
import { count, formatDuration, when } from '../format.js';
import { html, type Html } from '../html.js';
import { href, layout, type PageContext } from './layout.js';
import { sagaCount, sagaStatuses } from './sagas.js';

export interface OverviewData {
  overview: QueueOverview;
  throughput: Throughput;
  workers: RecentWorker[];
  /** Null when the saga tables do not exist (the queue alone was migrated). */
  sagas: SagaCounts | null;
}

function total(queues: readonly QueueCounts[], pick: (q: QueueCounts) => number) {
  return queues.reduce((sum, q) => sum + pick(q), 0);
}

export function overviewPage(ctx: PageContext, data: OverviewData) {
  const { overview, throughput, workers, sagas } = data;
  const queues = overview.queues;
  const capped = (status: JobStatus) => queues.some((q) => q.atLeast.includes(status));
  const tile = (label: string, n: number, atLeast: boolean, link: string, tone = '') =>
    html`<a
      class="tile ${tone}"
      href="${link}"
      data-testid="tile-${label.toLowerCase().replace(/\s+/g, '-')}"
      ><span class="n">${count(n, atLeast)}</span><span class="label">${label}</span></a
    >`;
  // Processing, waiting and dead are each read up to the cap across every queue (pending and
  // retry-waiting per queue): a cut sum holds one row past the cap, shown as the cap. Expired
  // leases are read first in the processing read, so they are exact unless they pass the cap.
  const acrossQueues = (status: JobStatus, pick: (q: QueueCounts) => number) => {
    const n = total(queues, pick);
    return { n: capped(status) ? Math.min(n, overview.cap) : n, atLeast: capped(status) };
  };
  const processing = acrossQueues('processing', (q) => q.processing);
  const waiting = acrossQueues('waiting', (q) => q.waiting);
  const dead = acrossQueues('dead', (q) => q.dead);
  const expiredAll = total(queues, (q) => q.expiredLeases);
  const expired = { n: Math.min(expiredAll, overview.cap), atLeast: expiredAll > overview.cap };
  const oldest = queues.reduce<number | null>(
    (max, q) => (q.oldestRunnableAgeMs === null ? max : Math.max(max ?? 0, q.oldestRunnableAgeMs)),
    null,
  );
  const tiles = html`<section class="tiles" data-live="tiles">
    ${tile(
      'Pending',
      total(queues, (q) => q.pending),
      capped('pending'),
      href(ctx, '/jobs', { status: 'pending' }),
    )}
    ${tile(
      'Processing',
      processing.n,
      processing.atLeast,
      href(ctx, '/jobs', { status: 'processing' }),
    )}
    ${tile(
      'Retry waiting',
      total(queues, (q) => q.retryable),
      capped('retryable'),
      href(ctx, '/jobs', { status: 'retryable' }),
    )}
    ${tile(
      'Waiting for a slot',
      waiting.n,
      waiting.atLeast,
      href(ctx, '/jobs', { status: 'waiting' }),
    )}
    ${tile('Dead', dead.n, dead.atLeast, href(ctx, '/jobs', { status: 'dead' }), dead.n > 0 ? 'bad' : '')}
    ${tile(
      'Expired leases',
      expired.n,
      expired.atLeast,
      href(ctx, '/jobs', { status: 'processing' }),
      expired.n > 0 ? 'warn' : '',
    )}
    <div class="tile">
      <span class="n">${oldest === null ? '–' : formatDuration(oldest)}</span
      ><span class="label">Oldest runnable</span>
    </div>
  </section>`;

  const cell = (q: QueueCounts, status: JobStatus, n: number) =>
    n === 0
      ? html`<td class="num none">0</td>`
      : html`<td class="num">
          <a href="${href(ctx, '/jobs', { queue: q.queue, status })}"
            >${count(n, q.atLeast.includes(status))}</a
          >
        </td>`;
  const queueTable =
    queues.length === 0
      ? html`<p class="empty">No queued, running or dead jobs.</p>`
      : html`<table class="grid" data-testid="queues">
          <thead>
            <tr>
              <th>queue</th>
              <th class="num">pending</th>
              <th class="num">retry waiting</th>
              <th class="num">processing</th>
              <th class="num">waiting for a slot</th>
              <th class="num">dead</th>
              <th class="num">dead last hour</th>
              <th class="num">expired leases</th>
              <th class="num">oldest runnable</th>
            </tr>
          </thead>
          <tbody>
            ${queues.map(
              (q) =>
                html`<tr data-queue="${q.queue}">
                  <td><a href="${href(ctx, '/jobs', { queue: q.queue })}">${q.queue}</a></td>
                  ${cell(q, 'pending', q.pending)}${cell(q, 'retryable', q.retryable)}${cell(q, 'processing', q.processing)}${cell(q, 'waiting', q.waiting)}${cell(q, 'dead', q.dead)}
                  <td class="num">
                    ${q.deadLastHour === 0 ? html`<span class="none">0</span>` : count(q.deadLastHour)}
                  </td>
                  <td class="num${q.expiredLeases > 0 ? ' warn' : ''}">
                    ${q.expiredLeases === 0 ? html`<span class="none">0</span>` : count(q.expiredLeases)}
                  </td>
                  <td class="num">
                    ${q.oldestRunnableAgeMs === null ? html`<span class="none">–</span>` : formatDuration(q.oldestRunnableAgeMs)}
                  </td>
                </tr>`,
            )}
          </tbody>
        </table>`;

  const workerTable =
    workers.length === 0
      ? html`<p class="empty">No worker held a lease or finished a job in the last 5 minutes.</p>`
      : html`<table class="grid" data-testid="workers">
          <thead>
            <tr>
              <th>worker</th>
              <th class="num">running now</th>
              <th>last seen</th>
            </tr>
          </thead>
          <tbody>
            ${workers.map(
              (w) =>
                html`<tr>
                  <td>
                    <a href="${href(ctx, '/jobs', { worker: w.workerId })}"
                      ><code>${w.workerId}</code></a
                    >
                  </td>
                  <td class="num">${w.running}</td>
                  <td>${when(w.lastSeenAt, ctx.now)}</td>
                </tr>`,
            )}
          </tbody>
        </table>`;

  const sagaTiles =
    sagas === null
      ? html`<p class="empty">The saga tables do not exist in this database.</p>`
      : html`<div class="chips" data-testid="saga-counts">
          ${sagaStatuses.map(
            (s) =>
              html`<a class="chip chip-${s}" href="${href(ctx, '/sagas', { status: s })}"
                ><span class="n">${sagaCount(sagas, s)}</span> ${s}</a
              >`,
          )}
        </div>`;

  const body: Html = html` <h1>Overview</h1>
    ${tiles}
    <section class="panel" data-live="throughput">
      <h2>Throughput, last hour</h2>
      ${throughputChart(throughput)}
    </section>
    <section class="panel" data-live="queues">
      <h2>Queues</h2>
      ${queueTable}
    </section>
    <div class="columns">
      <section class="panel" data-live="sagas">
        <h2>Sagas</h2>
        ${sagaTiles}
      </section>
      <section class="panel" data-live="workers">
        <h2>Workers seen in the last 5 minutes</h2>
        ${workerTable}
      </section>
    </div>
    <p class="footnote" data-live="footnote">
      Counts stop at ${count(overview.cap)} (shown as ${count(overview.cap)}+), read from the
      queue's indexes.
      ${overview.estimatedJobs === null ? '' : html`The jobs table holds about ${count(overview.estimatedJobs)} jobs, finished ones included (PostgreSQL's estimate).`}
      Updates every ${ctx.liveMs / 1000} s.
    </p>`;
  return layout(ctx, 'overview', 'Overview', body);
}
