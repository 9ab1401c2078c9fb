import type { SagaView } from '@skiplock/saga';
import {
  CliError,
  parseSagaId,
  databaseOption,
  databaseUrl,
  jsonOption,
  parseOptions,
  positionalArgs,
} from '../args.js';
import { sagaJson, strandedText } from '../format/saga.js';
import { cell, renderTable } from '../format/table.js';
import { formatDuration, relativeTime, timestamp } from '../format/time.js';
import { printJson, type Command } from '../io.js';

// The human view shows this much of an input or output; --json always has all of it.
const MAX_VALUE_CHARS = 4_000;

export const sagasShowCommand: Command = {
  name: 'sagas show',
  summary: 'one saga: status, current step, and every step and compensation with its outcome',
  usage: 'usage: skiplock sagas show <id> [--json] [--database-url URL]',
  async run(args, io) {
    const { values, positionals } = parseOptions(args, { ...databaseOption, ...jsonOption });
    const id = parseSagaId(positionalArgs(positionals, ['<id>'])[0]!);
    const url = databaseUrl(values['database-url'], io.env);
    const [{ withDatabase }, { readSaga }] = await Promise.all([
      import('../database.js'),
      import('@skiplock/saga'),
    ]);
    const { saga, now } = await withDatabase(url, async (db) => ({
      saga: await readSaga(db.pool, id),
      now: db.now,
    }));
    if (!saga) throw new CliError(`saga ${JSON.stringify(id)} does not exist`);
    if (values.json) {
      printJson(io, sagaJson(saga));
      return 0;
    }
    io.stdout(renderSaga(saga, now));
    return 0;
  },
};

function value(v: unknown): string {
  const text = JSON.stringify(v, null, 2) ?? 'null';
  return text.length > MAX_VALUE_CHARS
    ? `${text.slice(0, MAX_VALUE_CHARS)}\n… (${text.length} characters; --json shows all)`
    : text;
}

function renderSaga(saga: SagaView, now: Date): string {
  const current =
    saga.currentStep === null
      ? '-'
      : `${saga.currentKind === 'compensation' ? 'compensating ' : ''}${saga.currentStep}` +
        (saga.currentJobId ? ` (job ${saga.currentJobId})` : '');
  const fields: [string, string][] = [
    ['id', saga.id],
    ['name', `${saga.name} v${saga.version}`],
    ['status', saga.status],
    ['current', current],
    ['pivoted', saga.pivoted ? 'yes' : 'no'],
    ['cancel requested', saga.cancelRequested ? 'yes' : 'no'],
    ['deadline', timestamp(saga.deadline, now)],
    ['lock key', saga.lockKey ?? '-'],
    ['parent', saga.parent ? `${saga.parent.id} (step ${saga.parent.step})` : '-'],
    ['children', saga.children.map((c) => `${c.id} ${c.status}`).join(', ') || '-'],
    ['created at', timestamp(saga.createdAt, now)],
    ['updated at', timestamp(saga.updatedAt, now)],
    ['finished at', timestamp(saga.finishedAt, now)],
    ['error', saga.error ?? '-'],
    ['input', value(saga.input)],
  ];
  const width = Math.max(...fields.map(([k]) => k.length));
  const indent = (text: string) => text.replace(/\n/g, `\n  ${' '.repeat(width + 2)}`);
  const lines = [
    `saga ${saga.id}  ${saga.name} v${saga.version}  ${saga.status}`,
    '',
    // Above the fields: its history shows the step `pending` while nothing will run it.
    ...(saga.stranded ? [strandedText(saga.stranded), ''] : []),
    ...fields.map(([k, v]) => `  ${k.padEnd(width)}  ${indent(v)}`),
    '',
    'history',
    saga.history.length === 0
      ? '  (no steps yet)'
      : renderTable(
          [
            { header: 'step' },
            { header: 'status' },
            { header: 'attempts', align: 'right' },
            { header: 'job', align: 'right' },
            { header: 'started' },
            { header: 'took', align: 'right' },
            { header: 'output or error' },
          ],
          saga.history.map((h) => [
            `${h.kind === 'compensation' ? 'undo ' : ''}${h.step}`,
            h.status,
            String(h.attempts),
            h.jobId ?? '-',
            relativeTime(h.startedAt, now),
            h.startedAt && h.finishedAt
              ? formatDuration(h.finishedAt.getTime() - h.startedAt.getTime())
              : '-',
            h.error !== null
              ? cell(h.error, 80)
              : h.output === null || h.output === undefined
                ? '-'
                : cell(JSON.stringify(h.output), 80),
          ]),
        )
          .trimEnd()
          .replace(/^/gm, '  '),
  ];
  if (saga.signals.length > 0) {
    lines.push(
      '',
      'signals',
      renderTable(
        [{ header: 'name' }, { header: 'received' }, { header: 'consumed' }, { header: 'payload' }],
        saga.signals.map((s) => [
          cell(s.name, 40),
          relativeTime(s.receivedAt, now),
          relativeTime(s.consumedAt, now),
          cell(JSON.stringify(s.payload), 60),
        ]),
      )
        .trimEnd()
        .replace(/^/gm, '  '),
    );
  }
  lines.push('');
  return lines.join('\n');
}
