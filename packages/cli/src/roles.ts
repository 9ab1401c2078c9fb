import { queueGrants, roleIdentifiers, type RoleNames } from '@skiplock/queue/engine';
import { sagaGrants } from '@skiplock/saga';

export type { RoleNames } from '@skiplock/queue/engine';

/**
 * The roles themselves: created with LOGIN and no password when missing (set one with
 * `ALTER ROLE … PASSWORD`), left as they are when they exist. The owner may create the schema in
 * this database; the other two may only connect.
 */
function roleStatements(roles: RoleNames): string[] {
  const quoted = roleIdentifiers(roles);
  const create = (name: string, ident: string) =>
    [
      `DO $$ BEGIN`,
      `  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '${name}') THEN`,
      `    CREATE ROLE ${ident} LOGIN;`,
      `  END IF;`,
      `END $$`,
    ].join('\n');
  return [
    create(roles.owner, quoted.owner),
    create(roles.worker, quoted.worker),
    create(roles.producer, quoted.producer),
    [
      `DO $$ BEGIN`,
      `  EXECUTE format('GRANT CONNECT, CREATE ON DATABASE %I TO ${quoted.owner}', current_database());`,
      `  EXECUTE format('GRANT CONNECT ON DATABASE %I TO ${quoted.worker}, ${quoted.producer}', current_database());`,
      `END $$`,
    ].join('\n'),
  ];
}

/**
 * The whole script for `skiplock roles`: the roles, then the queue's grants (schema and jobs),
 * then the saga's (its tables), then `more` (the outbox's, from `@skiplock/outbox`, with
 * `--outbox`). Each part comes from the package that owns the tables. Every statement is safe to
 * run again, and grants on a table the migrations have not created yet are skipped, so the script
 * runs before the owner's first migration and again after every upgrade.
 */
export function rolesStatements(roles: RoleNames, more: readonly string[] = []): string[] {
  return [...roleStatements(roles), ...queueGrants(roles), ...sagaGrants(roles), ...more];
}

/** The script as text, for `--print`: statements separated by `;` and blank lines. */
export function rolesScript(
  roles: RoleNames,
  statements: readonly string[] = rolesStatements(roles),
): string {
  const header = [
    `-- skiplock least-privilege roles: owner ${roles.owner}, worker ${roles.worker}, producer ${roles.producer}.`,
    '-- Run as a superuser (or a CREATEROLE role that is a member of the owner role) in the',
    '-- database skiplock uses;',
    '-- run it again after `skiplock migrate` (as the owner) so that new tables are granted.',
  ].join('\n');
  return `${header}\n\n${statements.map((s) => `${s};\n`).join('\n')}`;
}
