import { scheduleRunState, type ScheduleState } from '@skiplock/queue';
import { clip, when } from '../format.js';
import { html, type Html } from '../html.js';
import { actionForm, actionsHint, layout, type PageContext } from './layout.js';

function state(s: ScheduleState): Html {
  // The job statuses' colours: paused as waiting, not seen as dead, active as running.
  switch (scheduleRunState(s)) {
    case 'paused':
      return html`<span class="badge badge-waiting" data-state="paused">paused</span>`;
    case 'unknown':
      return html`<span
        class="badge badge-cancelled"
        data-state="unknown"
        title="no scheduler of this definition has marked it seen (one of a version before @skiplock/queue's migration 0018 does not): whether anything runs it cannot be told here"
        >unknown</span
      >`;
    case 'not_seen':
      return html`<span
        class="badge badge-dead"
        data-state="not-seen"
        title="no scheduler running this definition has been seen for twice its on-time window: is any worker running it?"
        >not seen</span
      >`;
    case 'active':
      return html`<span class="badge badge-running" data-state="active">active</span>`;
  }
}

function row(ctx: PageContext, s: ScheduleState): Html {
  // The name goes in the form, not the path: a name of dots (`..`, which queue names allow) is
  // resolved away in a path by the browser and by the server alike.
  const fields = html`<input type="hidden" name="schedule" value="${s.name}" />`;
  return html`<tr data-schedule="${s.name}">
    <td>${clip(s.name, 48)}</td>
    <td><code>${clip(s.cron, 40)}</code></td>
    <td>${clip(s.timezone, 32)}</td>
    <td>${clip(s.jobType, 60)} <span class="none">(${clip(s.queue, 40)})</span></td>
    <td>${state(s)}</td>
    <td>${when(s.lastTickAt, ctx.now)}</td>
    <td>${s.seenAt === null ? html`<span class="none">never</span>` : when(s.seenAt, ctx.now)}</td>
    <td>
      ${
        s.paused
          ? actionForm(ctx, '/schedules/resume', 'Resume', {
              confirm: `Resume schedule ${s.name}? Ticks missed while it was paused follow its catchUp policy.`,
              fields,
            })
          : actionForm(ctx, '/schedules/pause', 'Pause', {
              confirm: `Pause schedule ${s.name}? No worker enqueues its ticks until it is resumed.`,
              danger: true,
              fields,
            })
      }
      ${
        // Only one no scheduler runs: an active one would be recorded again at its next pass,
        // and what defines a paused or unknown one cannot be told (see removeSchedule).
        scheduleRunState(s) === 'not_seen'
          ? actionForm(ctx, '/schedules/remove', 'Remove', {
              confirm: `Remove schedule ${s.name}? No scheduler running it has been seen; one that still defines it would record it again.`,
              danger: true,
              fields,
            })
          : ''
      }
    </td>
  </tr>`;
}

/**
 * The cron schedules workers have recorded: the definition that runs, paused or not, the last
 * tick handled, and when a scheduler running that definition was last seen; pause and resume,
 * and remove one no scheduler runs.
 */
export function schedulesPage(ctx: PageContext, schedules: readonly ScheduleState[] | null) {
  if (schedules === null) {
    const body = html`<h1>Schedules</h1>
      <p class="empty" data-testid="schedules-missing">
        This database's schedules table is missing or older than this dashboard: apply
        <code>@skiplock/queue</code>'s migrations (its <code>migrate()</code>, or
        <code>skiplock migrate</code>) to see schedules here.
      </p>`;
    return layout(ctx, 'schedules', 'Schedules', body);
  }
  const table =
    schedules.length === 0
      ? html`<p class="empty" data-testid="no-schedules">
          No schedules: a worker with <code>schedules</code> records them on its first pass.
        </p>`
      : html`<table class="grid" data-testid="schedules">
          <thead>
            <tr>
              <th>name</th>
              <th>cron</th>
              <th>time zone</th>
              <th>job (queue)</th>
              <th>state</th>
              <th>last tick</th>
              <th>scheduler seen</th>
              <th></th>
            </tr>
          </thead>
          <tbody>
            ${schedules.map((s) => row(ctx, s))}
          </tbody>
        </table>`;
  const body = html`<h1>Schedules</h1>
    <p class="hint">
      The definition shown is the one recorded last, by the process that started last; processes
      with another definition leave the schedule to it. A schedule is <em>not seen</em> when no
      scheduler running that definition has passed over it for twice its on-time window: a schedule
      taken out of the code reads so, and can then be removed.
    </p>
    ${actionsHint(ctx)}
    <section data-live="schedules">${table}</section>`;
  return layout(ctx, 'schedules', 'Schedules', body);
}
