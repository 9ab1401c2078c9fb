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
// A waiting job's key holders listed at most (a key's limit is usually small).
const MAX_HOLDERS = 20;

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
    const { job, holders, now } = await withDatabase(url, async (db) => {
      const client = await silentClient(db.pool);
      const found = await client.getJob(id);
      // What a waiting job waits behind: the jobs holding its key's slots. Only the job's id
      // named them before (found in an audit: a holder in a queue no worker serves kept a
      // waiting job there for good, and nothing said which).
      const holding =
        found?.status === 'waiting' && found.concurrencyKey !== null
          ? await client.listJobs({
              concurrencyKey: found.concurrencyKey,
              holdingSlot: true,
              limit: MAX_HOLDERS,
            })
          : null;
      return { now: db.now, job: found, holders: holding };
    });
    if (!job) throw new CliError(`job ${id} does not exist`);
    const timeline = jobTimeline(job);
    if (values.json) {
      printJson(io, {
        job: jobJson(job),
        timeline,
        ...(holders ? { keyHolders: holders.map(holderJson) } : {}),
      });
      return 0;
    }
    // Loaded already by the client above; imported here so --help need not load the library.
    const lease = await import('@skiplock/queue');
    io.stdout(renderJob(job, timeline, now, holders, lease));
    return 0;
  },
};

function holderJson(h: Job) {
  return {
    id: h.id,
    queue: h.queue,
    jobType: h.jobType,
    status: h.status,
    leaseExpiresAt: h.leaseExpiresAt?.toISOString() ?? null,
  };
}

type LeaseState = Pick<typeof import('@skiplock/queue'), 'isLeaseExpired' | 'isStoppedRunLive'>;

/** A key holder in a line: `job 12 processing in queue q (lease expired 3m ago: ...)`. */
function holderLine(h: Job, now: Date, state: LeaseState): string {
  const ends = h.leaseExpiresAt ? relativeTime(h.leaseExpiresAt, now) : '';
  const lease = state.isStoppedRunLive(h, now)
    ? ` (stopped; its handler has not returned: holds the slot until it does, or until its lease ends ${ends})`
    : state.isLeaseExpired(h, now)
      ? ` (lease expired ${ends}: its worker is gone or stuck)`
      : h.status === 'processing' && h.leaseExpiresAt
        ? ` (lease ends ${ends})`
        : '';
  return `job ${h.id} ${h.status} in queue ${h.queue}${lease}`;
}

function renderJob(
  job: Job,
  timeline: TimelineEntry[],
  now: Date,
  holders: Job[] | null,
  lease: LeaseState,
): string {
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
    ...(holders
      ? ([
          [
            'waits behind',
            holders.length === 0
              ? job.runAt > now
                ? `not due until ${timestamp(job.runAt, now)}; admitted then, while a slot is free`
                : "no job holds a slot now: the next admission pass admits it (unless its key's rate limit holds it)"
              : holders.map((h) => holderLine(h, now, lease)).join('\n') +
                (holders.length === MAX_HOLDERS
                  ? '\n… (skiplock jobs list --concurrency-key)'
                  : ''),
          ],
        ] as [string, string][])
      : []),
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
        t.event.replaceAll('_', ' '),
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
