import type { DeadMessage, OutboxCounts, PendingByTopic } from '@skiplock/outbox';
import {
  databaseOption,
  databaseUrl,
  jsonOption,
  parseId,
  parseInteger,
  parseOptions,
  positionalArgs,
  UsageError,
} from '../args.js';
import { cell, renderTable } from '../format/table.js';
import { formatDuration, relativeTime } from '../format/time.js';
import { printJson, type Command } from '../io.js';
import { loadOutbox } from '../load-outbox.js';

/** Most ids one `outbox retry` or `outbox kill` takes, as the package's functions do. */
const MAX_RETRY_IDS = 1_000;
/** Longest `--reason` of `outbox kill`, as `killPendingMessages` takes. */
const MAX_REASON = 500;
/** Topics `outbox stats` shows by name; the rest are summed in one row. */
const TOPICS_SHOWN = 20;
/** Pending messages `outbox stats` reads for them, due first, as the dashboard does. */
const TOPICS_CAP = 10_000;
const parseMessageId = (value: string, flag: string) => parseId(value, flag, 'a message id');

const countsJson = (c: OutboxCounts, t: PendingByTopic) => ({
  pending: c.pending,
  delivered: c.delivered,
  dead: c.dead,
  oldestPendingMs: c.oldestPendingMs,
  pendingByTopic: t,
});

/** Pending messages by topic, oldest first: a topic no relay serves stands out by its age. */
function topicTable(t: PendingByTopic): string {
  const rows = t.topics.map((p) => [
    cell(p.topic, 40),
    String(p.pending),
    formatDuration(p.oldestPendingMs),
    p.oldestId,
    cell(p.oldestKey ?? '-', 30),
  ]);
  if (t.others) {
    const o = t.others;
    rows.push([
      `(${o.topics} other topics)`,
      String(o.pending),
      formatDuration(o.oldestPendingMs),
      '-',
      '-',
    ]);
  }
  const table = renderTable(
    [
      { header: 'topic' },
      { header: 'pending', align: 'right' },
      { header: 'oldest' },
      { header: 'oldest id', align: 'right' },
      { header: 'its key' },
    ],
    rows,
  );
  const note = t.atLeast
    ? `counted among the first ${TOPICS_CAP.toLocaleString('en')} pending messages due; parked ones and backoffs may be left out\n`
    : '';
  return `\npending by topic, oldest first:\n${table}${note}`;
}

export const outboxStatsCommand: Command = {
  name: 'outbox stats',
  summary: 'outbox messages by status and the age of the oldest pending one',
  usage: [
    'usage: skiplock outbox stats [--json] [--database-url URL]',
    '',
    'Messages of the transactional outbox (@skiplock/outbox) by status: pending (not yet',
    'delivered, or waiting out a retry), delivered (kept for the relay retention), and dead',
    '(out of attempts, or refused for good by the sink; see `skiplock outbox dead`). A growing',
    'oldest-pending age means no relay runs, or the relays fall behind. Then the pending messages',
    `by topic, the ${TOPICS_SHOWN} with the oldest first, each with its oldest message's id and key:`,
    'a topic no relay serves stands out by its age, and holds back the later messages of those',
    'keys on every topic (key order spans topics); `skiplock outbox kill <id>` ends such a message.',
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, { ...databaseOption, ...jsonOption });
    positionalArgs(positionals, []);
    const url = databaseUrl(values['database-url'], io.env);
    const [{ withDatabase }, { outboxCounts, pendingByTopic }] = await Promise.all([
      import('../database.js'),
      loadOutbox(),
    ]);
    const { counts, topics } = await withDatabase(
      url,
      async (db) => ({
        counts: await outboxCounts(db.pool),
        topics: await pendingByTopic(db.pool, { limit: TOPICS_SHOWN, cap: TOPICS_CAP }),
      }),
      { requireSchema: false },
    );
    if (values.json) {
      printJson(io, countsJson(counts, topics));
      return 0;
    }
    io.stdout(
      renderTable(
        [{ header: 'status' }, { header: 'messages', align: 'right' }, { header: 'oldest' }],
        [
          [
            'pending',
            String(counts.pending),
            counts.oldestPendingMs === null ? '-' : formatDuration(counts.oldestPendingMs),
          ],
          ['delivered', String(counts.delivered), '-'],
          ['dead', String(counts.dead), '-'],
        ],
      ),
    );
    if (topics.topics.length > 0) io.stdout(topicTable(topics));
    return 0;
  },
};

const deadJson = (m: DeadMessage) => ({
  id: m.id,
  topic: m.topic,
  key: m.key,
  attempts: m.attempts,
  lastError: m.lastError,
  createdAt: m.createdAt.toISOString(),
  deadAt: m.deadAt.toISOString(),
});

export const outboxDeadCommand: Command = {
  name: 'outbox dead',
  summary: 'list dead outbox messages, newest first, with why they died',
  usage: [
    'usage: skiplock outbox dead [--limit N] [--before-id ID] [--json] [--database-url URL]',
    '',
    'Dead messages (never their payload), newest first, 50 per page by default (--limit up to',
    '1000). For the next page pass the last id shown as --before-id. The later messages of a dead',
    "one's key are delivered without it; `skiplock outbox retry` sends it again.",
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, {
      ...databaseOption,
      ...jsonOption,
      limit: { type: 'string' },
      'before-id': { type: 'string' },
    });
    positionalArgs(positionals, []);
    const limit = parseInteger('--limit', values.limit, { min: 1, max: 1_000 }) ?? 50;
    const before =
      values['before-id'] === undefined
        ? undefined
        : parseMessageId(values['before-id'], '--before-id');
    const url = databaseUrl(values['database-url'], io.env);
    const [{ withDatabase }, { deadMessages }] = await Promise.all([
      import('../database.js'),
      loadOutbox(),
    ]);
    const { list, now } = await withDatabase(
      url,
      async (db) => ({
        list: await deadMessages(db.pool, { limit, ...(before ? { beforeId: before } : {}) }),
        now: db.now,
      }),
      { requireSchema: false },
    );
    const next = list.length === limit ? list[list.length - 1]!.id : null;
    if (values.json) {
      printJson(io, { messages: list.map(deadJson), nextBeforeId: next });
      return 0;
    }
    if (list.length === 0) {
      io.stdout(before ? `no dead messages before ${before}\n` : 'no dead messages\n');
      return 0;
    }
    io.stdout(
      renderTable(
        [
          { header: 'id', align: 'right' },
          { header: 'topic' },
          { header: 'key' },
          { header: 'attempts', align: 'right' },
          { header: 'dead' },
          { header: 'last error' },
        ],
        list.map((m) => [
          m.id,
          cell(m.topic, 40),
          cell(m.key ?? '-', 30),
          String(m.attempts),
          relativeTime(m.deadAt, now),
          cell(m.lastError, 50),
        ]),
      ),
    );
    if (next) io.stdout(`more: skiplock outbox dead --before-id ${next}\n`);
    return 0;
  },
};

export const outboxRetryCommand: Command = {
  name: 'outbox retry',
  summary: 'send dead outbox messages back for delivery, with fresh attempts',
  usage: [
    'usage: skiplock outbox retry <id>... [--json] [--database-url URL]',
    '',
    `Up to ${MAX_RETRY_IDS} ids. A revived message keeps its id and is its key's next message.`,
    'One that is not dead (or does not exist) is left as it is, and so is a dead one whose key',
    'has a pending message (in flight or waiting to retry; retry it once those settled). Exits 1',
    'when any id was not revived.',
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, { ...databaseOption, ...jsonOption });
    if (positionals.length === 0) throw new UsageError('missing <id>');
    if (positionals.length > MAX_RETRY_IDS) {
      throw new UsageError(`${positionals.length} ids, more than ${MAX_RETRY_IDS} per call`);
    }
    const ids = [...new Set(positionals.map((id) => parseMessageId(id, '<id>')))];
    const url = databaseUrl(values['database-url'], io.env);
    const [{ withDatabase }, { retryDeadMessages }] = await Promise.all([
      import('../database.js'),
      loadOutbox(),
    ]);
    const revived = new Set(
      await withDatabase(url, (db) => retryDeadMessages(db.pool, ids), { requireSchema: false }),
    );
    const done = ids.filter((id) => revived.has(id));
    const left = ids.filter((id) => !revived.has(id));
    if (values.json) printJson(io, { revived: done, notRevived: left });
    else if (done.length > 0) {
      io.stdout(`revived ${done.length} message(s), pending again: ${done.join(', ')}\n`);
    }
    // On stderr with --json too: exit 1 always comes with its reason.
    if (left.length > 0) {
      io.stderr(
        `not revived: ${left.join(', ')} (not dead, no such message, or its key has a ` +
          'pending message; `skiplock outbox dead` lists the dead ones)\n',
      );
    }
    return left.length === 0 ? 0 : 1;
  },
};

export const outboxKillCommand: Command = {
  name: 'outbox kill',
  summary: 'send pending outbox messages dead by hand (one no relay will take holds its key)',
  usage: [
    'usage: skiplock outbox kill <id>... [--reason TEXT] [--json] [--database-url URL]',
    '',
    `Up to ${MAX_RETRY_IDS} ids. Each pending message is sent dead with the last error "killed by`,
    `an operator: TEXT" (--reason, ${MAX_REASON} characters at most), and its key's next message is`,
    'delivered: for one of a topic no relay serves (see `skiplock outbox stats`), or one its',
    'receiver will never accept. `skiplock outbox retry <id>` sends a killed one again. A message',
    'a relay is delivering now is not killed (kill it once that attempt settled), nor one not',
    'pending (delivered, dead, or no such message). Exits 1 naming any id not killed.',
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, {
      ...databaseOption,
      ...jsonOption,
      reason: { type: 'string' },
    });
    if (positionals.length === 0) throw new UsageError('missing <id>');
    if (positionals.length > MAX_RETRY_IDS) {
      throw new UsageError(`${positionals.length} ids, more than ${MAX_RETRY_IDS} per call`);
    }
    const reason = values.reason;
    if (reason !== undefined && reason.length > MAX_REASON) {
      throw new UsageError(`--reason is ${reason.length} characters, more than ${MAX_REASON}`);
    }
    const ids = [...new Set(positionals.map((id) => parseMessageId(id, '<id>')))];
    const url = databaseUrl(values['database-url'], io.env);
    const [{ withDatabase }, { killPendingMessages }] = await Promise.all([
      import('../database.js'),
      loadOutbox(),
    ]);
    const killed = await withDatabase(
      url,
      (db) => killPendingMessages(db.pool, ids, reason === undefined ? {} : { reason }),
      { requireSchema: false },
    );
    const done = new Set(killed.map((m) => m.id));
    const left = ids.filter((id) => !done.has(id));
    if (values.json) printJson(io, { killed, notKilled: left });
    else if (killed.length > 0) {
      io.stdout(
        renderTable(
          [{ header: 'killed', align: 'right' }, { header: 'topic' }, { header: 'key' }],
          killed.map((m) => [m.id, cell(m.topic, 40), cell(m.key ?? '-', 30)]),
        ),
      );
    }
    // On stderr with --json too: exit 1 always comes with its reason.
    if (left.length > 0) {
      io.stderr(
        `not killed: ${left.join(', ')} (not pending: delivered, dead or no such message; or a ` +
          'relay is delivering it now)\n',
      );
    }
    return left.length === 0 ? 0 : 1;
  },
};
