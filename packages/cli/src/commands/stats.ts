import type { QueueStats } from '@skiplock/queue';
import { databaseOption, databaseUrl, jsonOption, parseOptions, positionalArgs } from '../args.js';
import { silentClient } from '../lazy.js';
import { renderTable } from '../format/table.js';
import { formatDuration } from '../format/time.js';
import { printJson, type Command } from '../io.js';

export const statsCommand: Command = {
  name: 'stats',
  summary: 'depth per queue and status, oldest waiting job, expired leases, recent dead jobs',
  usage: [
    'usage: skiplock stats [--json] [--database-url URL]',
    '',
    'One row per queue and status:',
    '  depth           jobs in that status',
    '  oldest waiting  how long the oldest runnable pending or retry-waiting job has waited',
    '  expired leases  processing jobs whose lease passed (the sweeper will take them back)',
    '  dead last hour  jobs that went dead in the last hour',
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, { ...databaseOption, ...jsonOption });
    positionalArgs(positionals, []);
    const url = databaseUrl(values['database-url'], io.env);
    const { withDatabase } = await import('../database.js');
    const stats = await withDatabase(url, async (db) => (await silentClient(db.pool)).stats());
    if (values.json) {
      printJson(io, { stats: stats.map(statsJson) });
      return 0;
    }
    if (stats.length === 0) {
      io.stdout('no jobs\n');
      return 0;
    }
    io.stdout(
      renderTable(
        [
          { header: 'queue' },
          { header: 'status' },
          { header: 'depth', align: 'right' },
          { header: 'oldest waiting', align: 'right' },
          { header: 'expired leases', align: 'right' },
          { header: 'dead last hour', align: 'right' },
        ],
        stats.map((s) => [
          s.queue,
          s.status,
          String(s.count),
          s.oldestRunnableAgeMs === null ? '-' : formatDuration(s.oldestRunnableAgeMs),
          s.status === 'processing' ? String(s.expiredLeases) : '-',
          s.status === 'dead' ? String(s.deadLastHour) : '-',
        ]),
      ),
    );
    return 0;
  },
};

function statsJson(s: QueueStats) {
  return {
    queue: s.queue,
    status: s.status,
    count: s.count,
    oldestRunnableAgeMs: s.oldestRunnableAgeMs === null ? null : Math.round(s.oldestRunnableAgeMs),
    expiredLeases: s.expiredLeases,
    deadLastHour: s.deadLastHour,
  };
}
