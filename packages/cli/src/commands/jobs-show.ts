import type { Job } from '@skiplock/queue';
import {
  CliError,
  databaseOption,
  databaseUrl,
  jsonOption,
  parseJobId,
  parseOptions,
  positionalArgs,
} from '../args.js';
import { silentClient } from '../lazy.js';
import { jobJson, jobTimeline, type TimelineEntry } from '../format/job.js';
import { cell, renderTable } from '../format/table.js';
import { relativeTime, timestamp } from '../format/time.js';
import { printJson, type Command } from '../io.js';

// The human view shows this much of a payload; --json always has all of it.
const MAX_PAYLOAD_CHARS = 4_000;

export const jobsShowCommand: Command = {
  name: 'jobs show',
  summary: 'every field of one job and its attempt history',
  usage: 'usage: skiplock jobs show <id> [--json] [--database-url URL]',
  async run(args, io) {
    const { values, positionals } = parseOptions(args, { ...databaseOption, ...jsonOption });
    const [rawId] = positionalArgs(positionals, ['<id>']);
    const id = parseJobId(rawId!);
    const url = databaseUrl(values['database-url'], io.env);
    const { withDatabase } = await import('../database.js');
    const { job, now } = await withDatabase(url, async (db) => ({
      now: db.now,
      job: await (await silentClient(db.pool)).getJob(id),
    }));
    if (!job) throw new CliError(`job ${id} does not exist`);
    const timeline = jobTimeline(job);
    if (values.json) {
      printJson(io, { job: jobJson(job), timeline });
      return 0;
    }
    io.stdout(renderJob(job, timeline, now));
    return 0;
  },
};

function renderJob(job: Job, timeline: TimelineEntry[], now: Date): string {
  const or = (v: string | number | null) => (v === null ? '-' : String(v));
  let payload = JSON.stringify(job.payload, null, 2);
  if (payload.length > MAX_PAYLOAD_CHARS) {
    payload = `${payload.slice(0, MAX_PAYLOAD_CHARS)}\n… (${payload.length} characters; --json shows all)`;
  }
  const fields: [string, string][] = [
    ['id', job.id],
    ['queue', job.queue],
    ['type', job.jobType],
    ['status', job.status],
    ['attempts', `${job.attempts} of ${job.maxAttempts}`],
    ['priority', String(job.priority)],
    ['run at', timestamp(job.runAt, now)],
    ['created at', timestamp(job.createdAt, now)],
    ['updated at', timestamp(job.updatedAt, now)],
    ['completed at', timestamp(job.completedAt, now)],
    ['locked by', or(job.lockedBy)],
    ['locked at', timestamp(job.lockedAt, now)],
    ['lease expires', timestamp(job.leaseExpiresAt, now)],
    ['lease', `${job.leaseMs} ms`],
    ['timeout', job.timeoutMs === null ? '-' : `${job.timeoutMs} ms`],
    ['idempotency key', or(job.idempotencyKey)],
    [
      'concurrency key',
      job.concurrencyKey === null ? '-' : `${job.concurrencyKey} (limit ${job.concurrencyLimit})`,
    ],
    ['singleton key', or(job.singletonKey)],
    ['last error', or(job.lastError)],
  ];
  const width = Math.max(...fields.map(([k]) => k.length));
  const indent = (text: string) => text.replace(/\n/g, `\n  ${' '.repeat(width + 2)}`);
  const lines = [
    `job ${job.id}  ${job.jobType}  ${job.status}`,
    '',
    ...fields.map(([k, v]) => `  ${k.padEnd(width)}  ${indent(v)}`),
    `  ${'payload'.padEnd(width)}  ${indent(payload)}`,
    '',
    'timeline',
    renderTable(
      [{ header: 'at' }, { header: 'age' }, { header: 'event' }, { header: 'detail' }],
      timeline.map((t) => [
        t.at,
        relativeTime(new Date(t.at), now),
        t.event.replace('_', ' '),
        detail(t),
      ]),
    )
      .trimEnd()
      .replace(/^/gm, '  '),
    '',
  ];
  return lines.join('\n');
}

function detail(t: TimelineEntry): string {
  const parts: string[] = [];
  if (t.attempt !== null) parts.push(`attempt ${t.attempt}`);
  if (t.reason !== null) parts.push(`(${t.reason})`);
  if (t.message !== null) parts.push(cell(t.message, 100));
  return parts.join(' ') || '-';
}
