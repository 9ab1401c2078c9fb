import type { ScheduleRunState, ScheduleState } from '@skiplock/queue';
import {
  CliError,
  databaseOption,
  databaseUrl,
  jsonOption,
  parseOptions,
  positionalArgs,
} from '../args.js';
import { cell, renderTable } from '../format/table.js';
import { relativeTime } from '../format/time.js';
import { printJson, type Command } from '../io.js';

const scheduleJson = (s: ScheduleState, state: ScheduleRunState) => ({
  name: s.name,
  cron: s.cron,
  timezone: s.timezone,
  jobType: s.jobType,
  queue: s.queue,
  paused: s.paused,
  lastTickAt: s.lastTickAt.toISOString(),
  updatedAt: s.updatedAt.toISOString(),
  // When a scheduler running this definition last passed over it (null: none seen since it was
  // recorded), for an operator asking whether anything runs the schedule.
  seenAt: s.seenAt?.toISOString() ?? null,
  // paused, active, not_seen (no scheduler running it seen for twice its on-time window: nothing
  // may be enqueueing its ticks) or unknown (never marked seen): as the dashboard shows it.
  state,
});

export const schedulesListCommand: Command = {
  name: 'schedules list',
  summary: 'list cron schedules: pattern, job, state, last tick',
  usage: ['usage: skiplock schedules list [--json] [--database-url URL]'].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, { ...databaseOption, ...jsonOption });
    positionalArgs(positionals, []);
    const url = databaseUrl(values['database-url'], io.env);
    const [{ withDatabase }, { listSchedules, scheduleRunState }] = await Promise.all([
      import('../database.js'),
      import('@skiplock/queue'),
    ]);
    const { list, now } = await withDatabase(url, async (db) => ({
      list: await listSchedules(db.pool),
      now: db.now,
    }));
    if (values.json) {
      printJson(io, { schedules: list.map((s) => scheduleJson(s, scheduleRunState(s))) });
      return 0;
    }
    if (list.length === 0) {
      io.stdout('no schedules (a worker with `schedules` records them on its first pass)\n');
      return 0;
    }
    io.stdout(
      renderTable(
        [
          { header: 'name' },
          { header: 'cron' },
          { header: 'timezone' },
          { header: 'job' },
          { header: 'state' },
          { header: 'last tick' },
        ],
        list.map((s) => [
          cell(s.name, 30),
          cell(s.cron, 20),
          cell(s.timezone, 20),
          cell(`${s.jobType} (${s.queue})`, 40),
          // `unseen` for not_seen: as wide as `active`, so the table keeps to 80 columns.
          scheduleRunState(s) === 'not_seen' ? 'unseen' : scheduleRunState(s),
          relativeTime(s.lastTickAt, now),
        ]),
      ),
    );
    return 0;
  },
};

function pauseCommand(paused: boolean): Command {
  const verb = paused ? 'pause' : 'resume';
  return {
    name: `schedules ${verb}`,
    summary: paused ? 'pause a schedule: no ticks are enqueued' : 'resume a paused schedule',
    usage: [
      `usage: skiplock schedules ${verb} <name> [--json] [--database-url URL]`,
      '',
      paused
        ? 'No worker enqueues its ticks until it is resumed.'
        : "Ticks missed while it was paused follow the schedule's catchUp policy.",
      'Exits 1 when no schedule has that name.',
    ].join('\n'),
    async run(args, io) {
      const { values, positionals } = parseOptions(args, { ...databaseOption, ...jsonOption });
      const [name] = positionalArgs(positionals, ['name']);
      const url = databaseUrl(values['database-url'], io.env);
      const [{ withDatabase }, queue] = await Promise.all([
        import('../database.js'),
        import('@skiplock/queue'),
      ]);
      const set = paused ? queue.pauseSchedule : queue.resumeSchedule;
      const state = await withDatabase(url, (db) => set(db.pool, name!));
      if (!state) {
        throw new CliError(`no schedule named "${name}" (see \`skiplock schedules list\`)`);
      }
      if (values.json) printJson(io, scheduleJson(state, queue.scheduleRunState(state)));
      else io.stdout(`schedule ${state.name} ${paused ? 'paused' : 'resumed'}\n`);
      return 0;
    },
  };
}

export const schedulesPauseCommand = pauseCommand(true);
export const schedulesResumeCommand = pauseCommand(false);

export const schedulesRemoveCommand: Command = {
  name: 'schedules remove',
  summary: 'remove the row of a schedule no process defines any more',
  usage: [
    'usage: skiplock schedules remove <name> [--force] [--json] [--database-url URL]',
    '',
    'A schedule taken out of the code keeps its row, which reads unseen once no scheduler runs',
    'it. Only such a one is removed: an active one would be recorded again by its scheduler at',
    'its next pass, and whether anything still defines a paused or unknown one cannot be told.',
    'Exits 1 naming the state otherwise, or when no schedule has that name.',
    '  --force  remove it whatever its state; a scheduler that still defines it records it',
    '           again, active and from then (even one that was paused)',
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, {
      ...databaseOption,
      ...jsonOption,
      force: { type: 'boolean' },
    });
    const [name] = positionalArgs(positionals, ['name']);
    const url = databaseUrl(values['database-url'], io.env);
    const [{ withDatabase }, queue] = await Promise.all([
      import('../database.js'),
      import('@skiplock/queue'),
    ]);
    const removed = await withDatabase(url, async (db) => {
      try {
        return await queue.removeSchedule(db.pool, name!, { force: values.force === true });
      } catch (error) {
        if (error instanceof queue.SkiplockError && error.code === 'schedule_in_use') {
          throw new CliError(`${error.message}; --force removes it anyway`);
        }
        throw error;
      }
    });
    if (!removed) {
      throw new CliError(`no schedule named "${name}" (see \`skiplock schedules list\`)`);
    }
    if (values.json) printJson(io, scheduleJson(removed, queue.scheduleRunState(removed)));
    else io.stdout(`schedule ${removed.name} removed\n`);
    return 0;
  },
};
