import { databaseOption, databaseUrl, parseOptions, positionalArgs } from '../args.js';
import { databaseError } from '../db-errors.js';
import type { Command } from '../io.js';
import { loadOutbox } from '../load-outbox.js';

export const migrateCommand: Command = {
  name: 'migrate',
  summary: 'apply pending skiplock migrations (safe to run from many processes at once)',
  usage: [
    'usage: skiplock migrate [--outbox] [--database-url URL]',
    '',
    'Creates or upgrades the skiplock schema: the queue tables, then the saga tables, and with',
    '--outbox the transactional outbox table (@skiplock/outbox, which must be installed).',
    'Concurrent runs wait on an advisory lock.',
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, {
      ...databaseOption,
      outbox: { type: 'boolean' },
    });
    positionalArgs(positionals, []);
    const url = databaseUrl(values['database-url'], io.env);
    const [{ migrate }, { pino }, { openDatabase }, outbox] = await Promise.all([
      import('@skiplock/saga'),
      import('pino'),
      import('../database.js'),
      values.outbox ? loadOutbox() : null,
    ]);
    // Probe first so an unreachable server gets the same clear message as every other command.
    const db = await openDatabase(url, {
      requireSchema: false,
      applicationName: 'skiplock-migrate',
    });
    let applied: string[];
    try {
      ({ applied } = await migrate({
        pool: db.pool,
        logger: pino({ level: 'silent' }),
        include: outbox ? [outbox.outboxMigrations] : [],
      }));
    } catch (error) {
      throw databaseError(error, url);
    } finally {
      await db.close();
    }
    if (applied.length === 0) {
      io.stdout('skiplock schema was already up to date\n');
    } else {
      const list = applied.map((tag) => `  ${tag}\n`).join('');
      io.stdout(`applied ${applied.length} migration(s):\n${list}skiplock schema is up to date\n`);
    }
    return 0;
  },
};
