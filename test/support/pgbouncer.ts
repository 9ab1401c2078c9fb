import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { waitFor } from './wait.js';

/** Where the `pgbouncer` binary is: on PATH, or in the sbin directories Debian installs it to. */
export function findPgbouncer(): string | null {
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/local/sbin'];
  for (const dir of dirs) {
    if (dir && existsSync(join(dir, 'pgbouncer'))) return join(dir, 'pgbouncer');
  }
  return null;
}

export interface Pgbouncer {
  /** The database's URL, through PgBouncer. */
  url: string;
  /** PgBouncer's admin console (`SHOW POOLS`, `SHOW SERVERS`, ...). */
  adminUrl: string;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * Starts PgBouncer in front of the database `url` names, with a generated configuration: clients
 * are trusted (the test's own user, listed in an auth file), and PgBouncer logs in to PostgreSQL
 * with the URL's credentials.
 */
export async function startPgbouncer(
  binary: string,
  url: string,
  options: { poolMode?: 'transaction' | 'session'; poolSize?: number } = {},
): Promise<Pgbouncer> {
  const target = new URL(url);
  const user = decodeURIComponent(target.username || 'postgres');
  const password = decodeURIComponent(target.password);
  const database = target.pathname.slice(1);
  const quote = (v: string) => `'${v.replace(/'/g, "''")}'`;
  const dir = await mkdtemp(join(tmpdir(), 'skiplock-pgbouncer-'));
  // PgBouncer refuses to run as root; as root it drops to `nobody`, who must read these files.
  await chmod(dir, 0o755);
  const port = await freePort();
  const serverLogin = [
    `host=${target.hostname}`,
    `port=${target.port || 5432}`,
    `dbname=${quote(database)}`,
    `user=${quote(user)}`,
    ...(password ? [`password=${quote(password)}`] : []),
  ].join(' ');
  await writeFile(join(dir, 'users.txt'), `"${user}" "${password}"\n`, { mode: 0o644 });
  await writeFile(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `${database} = ${serverLogin}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(dir, 'users.txt')}`,
      `admin_users = ${user}`,
      `pool_mode = ${options.poolMode ?? 'transaction'}`,
      `default_pool_size = ${options.poolSize ?? 2}`,
      'max_client_conn = 200',
      'ignore_startup_parameters = extra_float_digits',
      '',
    ].join('\n'),
    { mode: 0o644 },
  );
  const args = [join(dir, 'pgbouncer.ini')];
  if (process.getuid?.() === 0) args.push('-u', 'nobody');
  const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-8_000);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  let gone = false;
  void exited.then(() => (gone = true));
  try {
    await waitFor(
      async () => {
        if (gone) throw new Error(`pgbouncer exited at start: ${output}`);
        return accepts(port);
      },
      { timeoutMs: 15_000, what: 'pgbouncer accepting connections' },
    );
  } catch (error) {
    child.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
  const through = (db: string) => {
    const u = new URL(url);
    u.hostname = '127.0.0.1';
    u.port = String(port);
    u.pathname = `/${db}`;
    u.password = '';
    return u.toString();
  };
  return {
    url: through(database),
    adminUrl: through('pgbouncer'),
    async stop() {
      if (!gone) {
        child.kill('SIGTERM');
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
