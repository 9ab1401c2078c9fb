import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** The same server and credentials, another database. */
export function withDatabaseName(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

function ident(name: string): string {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`unsafe database name: ${name}`);
  return `"${name}"`;
}

async function admin<T>(adminUrl: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

export async function createDatabase(adminUrl: string, name: string): Promise<string> {
  await admin(adminUrl, (c) => c.query(`CREATE DATABASE ${ident(name)}`));
  return withDatabaseName(adminUrl, name);
}

/** A new database copied from `template` (which must have no open connections). */
export async function cloneDatabase(
  adminUrl: string,
  template: string,
  prefix = 'skiplock_test',
): Promise<{ name: string; url: string }> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  await admin(adminUrl, async (c) => {
    // Concurrent clones of one template can collide on its lock; a short retry settles it.
    for (let attempt = 1; ; attempt++) {
      try {
        await c.query(`CREATE DATABASE ${ident(name)} TEMPLATE ${ident(template)}`);
        return;
      } catch (error) {
        const code = (error as { code?: string }).code;
        if (code !== '55006' || attempt >= 20) throw error;
        await new Promise((r) => setTimeout(r, 50 * attempt));
      }
    }
  });
  return { name, url: withDatabaseName(adminUrl, name) };
}

export async function dropDatabase(adminUrl: string, name: string): Promise<void> {
  await admin(adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${ident(name)} WITH (FORCE)`));
}

/** Names of the server's databases that start with `prefix` (matched literally). */
export async function listDatabases(adminUrl: string, prefix: string): Promise<string[]> {
  return admin(adminUrl, async (c) => {
    const { rows } = await c.query<{ datname: string }>(
      `SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY datname`,
      [prefix],
    );
    return rows.map((r) => r.datname);
  });
}
