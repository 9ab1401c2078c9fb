import type { DeadMessage, OutboxCounts, PendingByTopic } from '@skiplock/outbox';
import { clip, count, formatDuration, when } from '../format.js';
import { html, type Html } from '../html.js';
import { actionForm, actionsHint, href, layout, type PageContext } from './layout.js';

export type OutboxData =
  | {
      /** `package`: `@skiplock/outbox` is not installed; `table`: its migrations were not applied. */
      missing: 'package' | 'table';
    }
  | OutboxShown;

interface OutboxShown {
  missing: null;
  counts: OutboxCounts;
  /** Pending messages by topic, the oldest first. */
  byTopic: PendingByTopic;
  dead: DeadMessage[];
  /** The id to page on from (`?before=`), when there may be older dead messages. */
  nextBeforeId: string | null;
  before: string | undefined;
  /** Show each dead message's last error (off with `hidePayloads`: it may echo the message). */
  showErrors: boolean;
}

/**
 * Past the cap the oldest pending message is looked for among the first ones due only, so its age
 * is a lower bound, marked "+" like the counts: a message held back by its retries may be older.
 */
function oldestTile(counts: OutboxCounts): Html {
  const age = counts.oldestPendingMs;
  const bounded = age !== null && counts.atLeast.includes('pending');
  return html`<div class="tile" data-testid="outbox-oldest">
    <span
      class="n"
      title="${bounded ? 'at least: the oldest of the first pending messages due' : ''}"
      >${age === null ? '–' : `${formatDuration(age)}${bounded ? '+' : ''}`}</span
    ><span class="label">Oldest pending</span>
  </div>`;
}

function tiles(counts: OutboxCounts): Html {
  const tile = (label: string, n: number, status: 'pending' | 'delivered' | 'dead', tone = '') =>
    html`<div class="tile ${tone}" data-testid="outbox-${status}">
      <span class="n">${count(n, counts.atLeast.includes(status))}</span
      ><span class="label">${label}</span>
    </div>`;
  return html`<section class="tiles" data-live="outbox-counts">
    ${tile('Pending', counts.pending, 'pending')}
    ${tile('Delivered (kept)', counts.delivered, 'delivered')}
    ${tile('Dead', counts.dead, 'dead', counts.dead > 0 ? 'bad' : '')} ${oldestTile(counts)}
  </section>`;
}

/**
 * Pending messages by topic, the oldest first: a topic no relay serves (whose messages, and the
 * later ones of their keys on every topic, wait for ever) stands out by its age. Each row offers
 * to kill its oldest message, which a relay that is delivering it keeps (the kill names it).
 */
function topicTable(ctx: PageContext, t: PendingByTopic): Html {
  if (t.topics.length === 0) {
    return html`<p class="empty" data-testid="no-pending-topics">Nothing pending.</p>`;
  }
  const kill = (id: string, topic: string) =>
    actionForm(ctx, '/outbox/kill', `Kill ${id}`, {
      danger: true,
      confirm: `Kill message ${id} of ${topic}? It goes dead, and its key's next message is delivered.`,
      fields: html`<input type="hidden" name="id" value="${id}" />
        <input type="hidden" name="return" value="${ctx.self}" />
        <input
          type="text"
          name="reason"
          maxlength="400"
          placeholder="reason"
          aria-label="why message ${id} is killed"
        />`,
    });
  return html`<table class="grid" data-testid="pending-topics">
    <thead>
      <tr>
        <th>topic</th>
        <th class="num">pending</th>
        <th>oldest</th>
        <th class="num">oldest id</th>
        <th>its key</th>
        ${ctx.mode === 'act' ? html`<th></th>` : ''}
      </tr>
    </thead>
    <tbody>
      ${t.topics.map(
        (p) =>
          html`<tr data-topic="${p.topic}">
            <td>${clip(p.topic, 40)}</td>
            <td class="num">${count(p.pending, t.atLeast)}</td>
            <td>${formatDuration(p.oldestPendingMs)}</td>
            <td class="num">${p.oldestId}</td>
            <td>${clip(p.oldestKey, 32)}</td>
            ${ctx.mode === 'act' ? html`<td>${kill(p.oldestId, p.topic)}</td>` : ''}
          </tr>`,
      )}
      ${
        t.others
          ? html`<tr data-testid="other-topics">
              <td>${t.others.topics} other topics</td>
              <td class="num">${count(t.others.pending, t.atLeast)}</td>
              <td>${formatDuration(t.others.oldestPendingMs)}</td>
              <td></td>
              <td></td>
              ${ctx.mode === 'act' ? html`<td></td>` : ''}
            </tr>`
          : ''
      }
    </tbody>
  </table>`;
}

function deadTable(ctx: PageContext, data: OutboxShown, selectable: boolean): Html {
  if (data.dead.length === 0) {
    return html`<p class="empty" data-testid="no-dead-messages">No dead messages.</p>`;
  }
  return html`<table class="grid" data-testid="dead-messages">
    <thead>
      <tr>
        ${selectable ? html`<th><input type="checkbox" data-select-all aria-label="select every dead message" /></th>` : ''}
        <th class="num">id</th>
        <th>topic</th>
        <th>key</th>
        <th class="num">attempts</th>
        <th>published</th>
        <th>dead since</th>
        <th>last error</th>
      </tr>
    </thead>
    <tbody>
      ${data.dead.map(
        (m) =>
          html`<tr data-message-id="${m.id}">
            ${selectable ? html`<td><input type="checkbox" name="id" value="${m.id}" aria-label="select message ${m.id}" /></td>` : ''}
            <td class="num">${m.id}</td>
            <td>${clip(m.topic, 40)}</td>
            <td>${clip(m.key, 32)}</td>
            <td class="num">${m.attempts}</td>
            <td>${when(m.createdAt, ctx.now)}</td>
            <td>${when(m.deadAt, ctx.now)}</td>
            <td class="error">
              ${data.showErrors ? clip(m.lastError, 90) : html`<span class="none">hidden</span>`}
            </td>
          </tr>`,
      )}
    </tbody>
  </table>`;
}

/**
 * The transactional outbox: messages by status, and the dead ones (out of attempts, or refused
 * for good by the sink) with why, to send again once the cause is fixed.
 */
export function outboxPage(ctx: PageContext, data: OutboxData) {
  if (data.missing !== null) {
    const body = html`<h1>Outbox</h1>
      <p class="empty" data-testid="outbox-missing">
        ${
          data.missing === 'package'
            ? html`<code>@skiplock/outbox</code> is not installed beside the dashboard: install it
                in this project to see its messages here.`
            : html`This database has no outbox: apply <code>@skiplock/outbox</code>'s migrations
                (its <code>migrate()</code>, or <code>skiplock migrate --outbox</code>) to use it.`
        }
      </p>`;
    return layout(ctx, 'outbox', 'Outbox', body);
  }
  const selectable = ctx.mode === 'act' && data.dead.length > 0;
  const table = deadTable(ctx, data, selectable);
  const paging = html`<nav class="paging" data-testid="paging">
    ${data.before ? html`<a href="${href(ctx, '/outbox')}">« newest</a>` : ''}
    ${
      data.nextBeforeId
        ? html`<a href="${href(ctx, '/outbox', { before: data.nextBeforeId })}" data-testid="older"
            >older »</a
          >`
        : ''
    }
  </nav>`;
  const body = html`<h1>Outbox</h1>
    ${tiles(data.counts)}
    <h2>Pending by topic</h2>
    <p class="hint">
      The topics with the oldest pending messages first. A message no relay takes (its topic served
      by none) holds back the later messages of its key on every topic: kill it, and the key goes
      on; a killed message can be sent again from the dead ones.
      ${data.byTopic.atLeast ? 'Counted among the first 10,000 due.' : ''}
    </p>
    <section data-live="outbox-topics">${topicTable(ctx, data.byTopic)}</section>
    <h2>Dead messages</h2>
    <p class="hint">
      Sent again, a message gets fresh attempts and keeps its id, so a broker's de-duplication still
      knows it. One whose key has a pending message stays dead until those settle.
    </p>
    ${actionsHint(ctx)}
    <section data-live="outbox-dead">
      ${
        selectable
          ? html`<form method="post" action="${href(ctx, '/outbox/retry')}" class="bulk-form">
              ${table}
              <div class="bulk">
                <input type="hidden" name="_csrf" value="${ctx.csrf ?? ''}" />
                <input type="hidden" name="return" value="${ctx.self}" />
                <button type="submit" class="primary" data-testid="outbox-retry">
                  Send the selected dead messages again
                </button>
              </div>
            </form>`
          : table
      }
    </section>
    ${paging}`;
  return layout(ctx, 'outbox', 'Outbox', body);
}
