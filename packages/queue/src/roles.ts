/**
 * Least-privilege roles: the grants each of skiplock's three roles needs on the queue's schema
 * and table. The queue owns the `skiplock` schema and `skiplock.jobs`; packages built on it (the
 * saga) state the grants for their own tables with {@link grantsOnTable}, and the CLI composes
 * them into one script (`skiplock roles`).
 *
 * - owner: owns the schema and every table in it, runs the migrations;
 * - worker: reads and writes the tables (claim, settle, heartbeat, sweep, retention deletes,
 *   saga advance), never owns them and has no CREATE on the schema;
 * - producer: enqueues jobs and reads them; no UPDATE or DELETE on `skiplock.jobs`, so it can
 *   neither claim (`FOR UPDATE` needs UPDATE), settle, nor remove a job.
 *
 * Every statement is text built from validated, quoted identifiers (DDL takes no parameters),
 * and safe to run again: the script is idempotent and is re-run after each upgrade.
 */
import { queueFlowMigrations, queueMigrations } from './migrate.js';

/** The three roles, as plain (unquoted) names. */
export interface RoleNames {
  owner: string;
  worker: string;
  producer: string;
}

const SIMPLE_IDENTIFIER = /^[a-z_][a-z0-9_]*$/;

/**
 * A role name as a quoted identifier. Only simple lower-case identifiers (`[a-z_][a-z0-9_]*`, at
 * most 63 bytes, not starting with `pg_`, not `public`) are accepted, so the name in the script is
 * the name PostgreSQL stores and never needs escaping.
 */
export function roleIdentifier(name: string, what = 'role name'): string {
  if (!SIMPLE_IDENTIFIER.test(name) || name.length > 63) {
    throw new TypeError(
      `${what} "${name}" is not a simple identifier: use lower-case letters, digits and _, ` +
        'starting with a letter or _, at most 63 characters',
    );
  }
  if (name.startsWith('pg_') || name === 'public' || name === 'none') {
    throw new TypeError(`${what} "${name}" is reserved by PostgreSQL`);
  }
  return `"${name}"`;
}

/** Checks all three names and that they differ; returns them quoted. */
export function roleIdentifiers(roles: RoleNames): RoleNames {
  const quoted = {
    owner: roleIdentifier(roles.owner, 'owner role'),
    worker: roleIdentifier(roles.worker, 'worker role'),
    producer: roleIdentifier(roles.producer, 'producer role'),
  };
  const names = [roles.owner, roles.worker, roles.producer];
  if (new Set(names).size !== names.length) {
    throw new TypeError(
      `the owner, worker and producer roles must be three different roles, got ${names.join(', ')}`,
    );
  }
  return quoted;
}

/**
 * Runs `statements` only when `skiplock.<table>` exists, so the script can run before the
 * migrations have created the table (and again after them).
 */
export function grantsOnTable(table: string, statements: readonly string[]): string {
  if (!SIMPLE_IDENTIFIER.test(table)) throw new TypeError(`bad table name "${table}"`);
  return [
    `DO $$ BEGIN`,
    `  IF to_regclass('skiplock.${table}') IS NOT NULL THEN`,
    ...statements.map((s) => `    ${s};`),
    `  END IF;`,
    `END $$`,
  ].join('\n');
}

/**
 * Makes the owner own the schema and everything in it, for a database migrated before under
 * another role (a superuser, say): without it the owner could not run the next migration.
 * Indexes and the sequences of serial columns follow their tables; extended statistics do not.
 */
function adoptSchema(name: string, owner: string): string {
  return [
    `DO $$`,
    `DECLARE r record;`,
    `BEGIN`,
    `  ALTER SCHEMA skiplock OWNER TO ${owner};`,
    `  FOR r IN SELECT c.oid::regclass::text AS name,`,
    `             CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'`,
    `               WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END AS kind`,
    `           FROM pg_class c`,
    `           WHERE c.relnamespace = 'skiplock'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')`,
    `             AND c.relowner <> '${name}'::regrole`,
    `             AND NOT (c.relkind = 'S' AND EXISTS (SELECT FROM pg_depend d`,
    `               WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('a', 'i')))`,
    `  LOOP`,
    `    EXECUTE format('ALTER %s %s OWNER TO ${owner}', r.kind, r.name);`,
    `  END LOOP;`,
    `  FOR r IN SELECT t.oid::regtype::text AS name, CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END AS kind`,
    `           FROM pg_type t`,
    `           WHERE t.typnamespace = 'skiplock'::regnamespace AND t.typtype IN ('e', 'd', 'r')`,
    `             AND t.typowner <> '${name}'::regrole`,
    `  LOOP`,
    `    EXECUTE format('ALTER %s %s OWNER TO ${owner}', r.kind, r.name);`,
    `  END LOOP;`,
    `  FOR r IN SELECT p.oid::regprocedure::text AS name FROM pg_proc p`,
    `           WHERE p.pronamespace = 'skiplock'::regnamespace AND p.proowner <> '${name}'::regrole`,
    `  LOOP`,
    `    EXECUTE format('ALTER ROUTINE %s OWNER TO ${owner}', r.name);`,
    `  END LOOP;`,
    // Extended statistics (jobs_queue_status) are objects of their own, not their table's.
    `  FOR r IN SELECT format('%I.%I', s.stxnamespace::regnamespace, s.stxname) AS name`,
    `           FROM pg_statistic_ext s`,
    `           WHERE s.stxnamespace = 'skiplock'::regnamespace AND s.stxowner <> '${name}'::regrole`,
    `  LOOP`,
    `    EXECUTE format('ALTER STATISTICS %s OWNER TO ${owner}', r.name);`,
    `  END LOOP;`,
    `END $$`,
  ].join('\n');
}

/**
 * The schema: owned by the owner (created here when missing, so the owner's migrations find it;
 * adopted with its contents when another role created it),
 * usable by the worker and the producer, CREATE for nobody else. Default privileges give the
 * worker its rights on every table and sequence the owner creates later, so a migration that adds
 * a table needs no new grant for the worker.
 */
export function schemaGrants(roles: RoleNames): string[] {
  const { owner, worker, producer } = roleIdentifiers(roles);
  return [
    `CREATE SCHEMA IF NOT EXISTS skiplock AUTHORIZATION ${owner}`,
    adoptSchema(roles.owner, owner),
    `REVOKE ALL ON SCHEMA skiplock FROM PUBLIC`,
    `GRANT USAGE ON SCHEMA skiplock TO ${worker}, ${producer}`,
    `ALTER DEFAULT PRIVILEGES FOR ROLE ${owner} IN SCHEMA skiplock ` +
      `GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO ${worker}`,
    `ALTER DEFAULT PRIVILEGES FOR ROLE ${owner} IN SCHEMA skiplock ` +
      `GRANT USAGE ON SEQUENCES TO ${worker}`,
  ];
}

/**
 * The migration bookkeeping table `set` records in: readable by the worker and producer, written
 * by the owner alone (the default privileges above would let the worker write it).
 */
export function bookkeepingGrants(roles: RoleNames, table: string): string {
  const { worker, producer } = roleIdentifiers(roles);
  return grantsOnTable(table, [
    `REVOKE ALL ON skiplock.${table} FROM ${worker}, ${producer}`,
    `GRANT SELECT ON skiplock.${table} TO ${worker}, ${producer}`,
  ]);
}

/**
 * The queue's table. The worker claims, settles, renews leases, sweeps and deletes finished jobs;
 * the producer inserts (enqueue, including `ON CONFLICT DO NOTHING` and the idempotency-key
 * lookup) and reads (`getJob`, `listJobs`, `stats`). An enqueue's wake-up is a `pg_notify` call
 * inside its insert, which needs no grant: `pg_notify` is public.
 */
export function queueGrants(roles: RoleNames): string[] {
  const { worker, producer } = roleIdentifiers(roles);
  return [
    ...schemaGrants(roles),
    bookkeepingGrants(roles, queueMigrations.table),
    bookkeepingGrants(roles, queueFlowMigrations.table),
    // skiplock.admit() (concurrency keys) runs as its caller and updates jobs: workers only.
    // Functions are executable by PUBLIC unless revoked; a producer's call fails on the UPDATE.
    grantsOnTable('jobs', [
      `GRANT SELECT, INSERT, UPDATE, DELETE ON skiplock.jobs TO ${worker}`,
      `GRANT USAGE ON SEQUENCE skiplock.jobs_id_seq TO ${worker}`,
      `REVOKE UPDATE, DELETE, TRUNCATE ON skiplock.jobs FROM ${producer}`,
      `GRANT SELECT, INSERT ON skiplock.jobs TO ${producer}`,
      `GRANT USAGE ON SEQUENCE skiplock.jobs_id_seq TO ${producer}`,
    ]),
    // Admission (workers) logs and prunes the starts of rate-limited keys.
    grantsOnTable('rate_starts', [
      `GRANT SELECT, INSERT, DELETE ON skiplock.rate_starts TO ${worker}`,
      `REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON skiplock.rate_starts FROM ${producer}`,
    ]),
    // Schedulers run in workers (they upsert definitions and move ticks on); producers list.
    // DELETE is an operator's, as a job's retry is: `removeSchedule` under the worker role.
    grantsOnTable('schedules', [
      `GRANT SELECT, INSERT, UPDATE, DELETE ON skiplock.schedules TO ${worker}`,
      `REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON skiplock.schedules FROM ${producer}`,
      `GRANT SELECT ON skiplock.schedules TO ${producer}`,
    ]),
  ];
}
