import { migrate } from '@skiplock/queue';
import { pino } from 'pino';
import { databaseUrl, parseOptions, type Command } from '../cli.js';

export const migrateCommand: Command = {
  name: 'migrate',
  summary: 'apply pending skiplock migrations (safe to run from many processes at once)',
  usage: 'usage: skiplock migrate [--database-url URL]',
  async run(args, io) {
    const { values } = parseOptions(args, { 'database-url': { type: 'string' } });
    const connectionString = databaseUrl(values['database-url'] as string | undefined, io);
    await migrate({ connectionString, logger: pino({ level: 'silent' }) });
    io.stdout('skiplock schema is up to date\n');
    return 0;
  },
};
