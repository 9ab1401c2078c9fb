import {
  CliError,
  databaseOption,
  databaseUrl,
  parseOptions,
  positionalArgs,
  UsageError,
} from '../args.js';
import { databaseError } from '../db-errors.js';
import type { Command } from '../io.js';
import { loadOutbox } from '../load-outbox.js';

const options = {
  ...databaseOption,
  owner: { type: 'string' },
  worker: { type: 'string' },
  producer: { type: 'string' },
  print: { type: 'boolean' },
  migrate: { type: 'boolean' },
  outbox: { type: 'boolean' },
} as const;

export const rolesCommand: Command = {
  name: 'roles',
  summary: 'create least-privilege owner, worker and producer roles (or --print the SQL)',
  usage: [
    'usage: skiplock roles --owner NAME --worker NAME --producer NAME [--print | --migrate]',
    '                      [--outbox] [--database-url URL]',
    '',
    'Creates three roles and grants each only what it needs in this database:',
    '  owner     owns the skiplock schema and tables, runs `skiplock migrate`',
    '  worker    runs jobs and saga steps: reads and writes the tables, cannot alter the schema',
    '  producer  enqueues jobs, starts and signals sagas, reads their status; cannot claim,',
    '            complete, update or delete jobs',
    'Roles are created with LOGIN and no password when missing; existing roles are kept.',
    'Names must be simple identifiers (lower-case letters, digits, _).',
    '',
    '  --print    print the SQL (for review, or to run with psql) and touch nothing',
    '  --migrate  after the grants, migrate as the owner and grant the new tables',
    '  --outbox   also the outbox table (@skiplock/outbox, which must be installed): the producer',
    '             publishes, the worker relays; with --migrate its migrations are applied too',
    '',
    'Run it as a superuser, or a role with CREATEROLE that is a member of the owner role. The',
    'SQL is safe to run again: run',
    'it after every `skiplock migrate`, so tables added by an upgrade are granted too.',
  ].join('\n'),
  async run(args, io) {
    const { values, positionals } = parseOptions(args, options);
    positionalArgs(positionals, []);
    const missing = (['owner', 'worker', 'producer'] as const).find((k) => !values[k]);
    if (missing) throw new UsageError(`missing --${missing} NAME`);
    if (values.print && values.migrate) {
      throw new UsageError('--print and --migrate do not go together');
    }
    const roles = { owner: values.owner!, worker: values.worker!, producer: values.producer! };
    const [{ rolesScript, rolesStatements }, outbox] = await Promise.all([
      import('../roles.js'),
      values.outbox ? loadOutbox() : null,
    ]);
    let statements: string[];
    try {
      statements = rolesStatements(roles, outbox ? outbox.outboxGrants(roles) : []);
    } catch (error) {
      if (error instanceof TypeError) throw new UsageError(error.message);
      throw error;
    }
    if (values.print) {
      io.stdout(rolesScript(roles, statements));
      return 0;
    }
    const url = databaseUrl(values['database-url'], io.env);
    const [{ openDatabase }, { migrate }, { pino }, { default: pg }] = await Promise.all([
      import('../database.js'),
      import('@skiplock/saga'),
      import('pino'),
      import('pg'),
    ]);
    const db = await openDatabase(url, { requireSchema: false, applicationName: 'skiplock-roles' });
    // A checked-out connection has no error listener of the pool's: a backend terminated while
    // it works would end the process with an unhandled 'error' event; the failed query says it.
    const ignoreLost = () => {};
    const apply = async () => {
      const client = await db.pool.connect();
      client.on('error', ignoreLost);
      try {
        await client.query('BEGIN');
        for (const statement of statements) await client.query(statement);
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {});
        throw error;
      } finally {
        client.off('error', ignoreLost);
        client.release();
      }
    };
    let applied: string[] = [];
    try {
      await apply();
      if (values.migrate) {
        // A session whose role is the owner, so every object the migrations create is the owner's.
        const owner = new pg.Pool({
          connectionString: url,
          max: 1,
          options: `-c role=${roles.owner}`,
          application_name: 'skiplock-roles',
        });
        owner.on('error', ignoreLost);
        try {
          ({ applied } = await migrate({
            pool: owner,
            logger: pino({ level: 'silent' }),
            include: outbox ? [outbox.outboxMigrations] : [],
          }));
        } finally {
          await owner.end();
        }
        await apply();
      }
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code === '42501') {
        throw new CliError(
          `${(error as Error).message}: run skiplock roles as a superuser, or a role with CREATEROLE that is a member of the owner role`,
        );
      }
      throw databaseError(error, url);
    } finally {
      await db.close();
    }
    io.stdout(
      `roles ready: owner ${roles.owner}, worker ${roles.worker}, producer ${roles.producer}\n` +
        (values.migrate
          ? applied.length === 0
            ? 'skiplock schema was already up to date\n'
            : `applied ${applied.length} migration(s) as ${roles.owner}\n`
          : ''),
    );
    return 0;
  },
};
