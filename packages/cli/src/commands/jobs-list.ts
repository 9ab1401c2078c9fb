import type { JobStatus } from '@skiplock/queue';
import {
  UsageError,
  databaseOption,
  databaseUrl,
  jsonOption,
  parseInteger,
  parseJobId,
  parseOptions,
  positionalArgs,
} from '../args.js';
import { silentClient } from '../lazy.js';
import { jobSummaryJson } from '../format/job.js';
import { cell, renderTable } from '../format/table.js';
import { relativeTime } from '../format/time.js';
import { printJson, type Command } from '../io.js';

// Checked against the schema's enum by a test, so help and validation stay in step with it.
export const jobStatuses: readonly JobStatus[] = [
  'pending',
  'processing',
  'retryable',
  'completed',
  'dead',
  'cancelled',
  'waiting',
];
const statuses: readonly string[] = jobStatuses;

export const jobsListCommand: Command = {
  name: 'jobs list',
  summary: 'list jobs, newest first, filtered by status, queue, type, worker or concurrency key',
  usage: [
    'usage: skiplock jobs list [--status S]... [--queue Q] [--type T] [--worker ID] [--limit N]',
    '                          [--concurrency-key K] [--before-id ID] [--json] [--database-url URL]',
    '',
    `  --status S      ${statuses.join(', ')} (repeat or comma-separate)`,
    '  --worker ID     jobs the worker holds (with --status processing) or last ran',
    '  --concurrency-key K  jobs of concurrency key K; with --status pending,retryable,processing',
    '                  the ones holding its slots, which its waiting jobs wait behind',
    '  --limit N       at most N jobs, 1 to 1000 (default 50)',
    '  --before-id ID  only jobs older than ID: pass the last id shown to see the next page',
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, {
      ...databaseOption,
      ...jsonOption,
      status: { type: 'string', multiple: true },
      queue: { type: 'string' },
      type: { type: 'string' },
      worker: { type: 'string' },
      'concurrency-key': { type: 'string' },
      limit: { type: 'string' },
      'before-id': { type: 'string' },
    });
    positionalArgs(positionals, []);
    const wanted = (values.status ?? []).flatMap((s) => s.split(',')).map((s) => s.trim());
    for (const s of wanted) {
      if (!statuses.includes(s)) {
        throw new UsageError(`--status must be one of ${statuses.join(', ')}, got "${s}"`);
      }
    }
    const limit = parseInteger('--limit', values.limit, { min: 1, max: 1_000 }) ?? 50;
    const beforeId =
      values['before-id'] === undefined
        ? undefined
        : parseJobId(values['before-id'], '--before-id');
    const url = databaseUrl(values['database-url'], io.env);
    const { withDatabase } = await import('../database.js');
    const { jobs, now } = await withDatabase(url, async (db) => ({
      now: db.now,
      jobs: await (
        await silentClient(db.pool)
      ).listJobs({
        statuses: wanted as JobStatus[],
        queue: values.queue,
        jobType: values.type,
        workerId: values.worker,
        concurrencyKey: values['concurrency-key'],
        limit,
        beforeId,
      }),
    }));
    // A full page may have more behind it; the last id is where the next page starts.
    const nextBeforeId = jobs.length === limit ? jobs[jobs.length - 1]!.id : null;
    if (values.json) {
      printJson(io, { jobs: jobs.map(jobSummaryJson), nextBeforeId });
      return 0;
    }
    if (jobs.length === 0) {
      io.stdout('no jobs match\n');
      return 0;
    }
    io.stdout(
      renderTable(
        [
          { header: 'id', align: 'right' },
          { header: 'queue' },
          { header: 'type' },
          { header: 'status' },
          { header: 'attempts', align: 'right' },
          { header: 'created' },
          { header: 'updated' },
          { header: 'next run' },
          { header: 'last error' },
        ],
        jobs.map((j) => [
          j.id,
          cell(j.queue, 30),
          cell(j.jobType, 40),
          j.status,
          `${j.attempts}/${j.maxAttempts}`,
          relativeTime(j.createdAt, now),
          relativeTime(j.updatedAt, now),
          j.status === 'pending' || j.status === 'retryable' || j.status === 'waiting'
            ? relativeTime(j.runAt, now)
            : '-',
          cell(j.lastError, 50),
        ]),
      ),
    );
    if (nextBeforeId) io.stdout(`more: skiplock jobs list --before-id ${nextBeforeId} ...\n`);
    return 0;
  },
};
