import { readFileSync, readdirSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { createDatabase, dropDatabase, startDatabase, withDatabaseName } from '@skiplock/devdb';

const MACHINE_DEFAULT = 'postgres://postgres@127.0.0.1:5432/postgres';

export interface Server {
  adminUrl: string;
  source: string;
  stop(): Promise<void>;
}

async function answers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => {});
  }
}

/** DATABASE_URL, else the machine's default server if it answers, else a dev database. */
export async function resolveServer(log: (line: string) => void): Promise<Server> {
  if (process.env.DATABASE_URL) {
    return { adminUrl: process.env.DATABASE_URL, source: 'DATABASE_URL', stop: async () => {} };
  }
  if (await answers(MACHINE_DEFAULT)) {
    return { adminUrl: MACHINE_DEFAULT, source: 'local server', stop: async () => {} };
  }
  const db = await startDatabase({ log });
  return { adminUrl: db.url, source: db.source, stop: () => db.stop() };
}

export async function withAdmin<T>(url: string, work: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

export interface FreshDatabase {
  name: string;
  url: string;
  drop(): Promise<void>;
}

export async function freshDatabase(adminUrl: string, template?: string): Promise<FreshDatabase> {
  const name = `skiplock_bench_${randomBytes(5).toString('hex')}`;
  if (template) {
    await withAdmin(adminUrl, (c) => c.query(`CREATE DATABASE ${name} TEMPLATE ${template}`));
  } else {
    await createDatabase(adminUrl, name);
  }
  return {
    name,
    url: withDatabaseName(adminUrl, name),
    drop: () => dropDatabase(adminUrl, name),
  };
}

export interface ServerSettings {
  version: string;
  shared_buffers: string;
  synchronous_commit: string;
  fsync: string;
  max_connections: string;
  wal_level: string;
}

export async function serverSettings(adminUrl: string): Promise<ServerSettings> {
  return withAdmin(adminUrl, async (c) => {
    const show = async (name: string) =>
      (await c.query<Record<string, string>>(`SHOW ${name}`)).rows[0]![name]!;
    return {
      version: await show('server_version'),
      shared_buffers: await show('shared_buffers'),
      synchronous_commit: await show('synchronous_commit'),
      fsync: await show('fsync'),
      max_connections: await show('max_connections'),
      wal_level: await show('wal_level'),
    };
  });
}

/** CPU seconds (user + system) a process has used, from /proc; null when unreadable. */
export function procCpuSeconds(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces) start after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const utime = Number(fields[11]);
    const stime = Number(fields[12]);
    return (utime + stime) / CLOCK_TICKS;
  } catch {
    return null;
  }
}

// USER_HZ is 100 on every Linux this runs on; /proc reports CPU time in these ticks.
const CLOCK_TICKS = 100;

export interface ServerSample {
  at: number;
  walLsn: string;
  xacts: number;
  /** CPU seconds per backend pid of the benchmark database plus the server's own processes. */
  cpu: Map<number, number> | null;
}

/**
 * Samples the server: WAL position, committed transactions of the database, and the CPU time of
 * the backends serving it and of the background processes (WAL writer, checkpointer,
 * autovacuum). CPU is null when the server's processes are not visible here (another host,
 * a container).
 */
export async function sampleServer(client: pg.Client, database: string): Promise<ServerSample> {
  const { rows } = await client.query<{ lsn: string; xacts: string; pids: number[] }>(
    `SELECT pg_current_wal_lsn()::text AS lsn,
            (SELECT (xact_commit + xact_rollback)::text FROM pg_stat_database WHERE datname = $1) AS xacts,
            (SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity
              WHERE (datname = $1 AND pid <> pg_backend_pid())
                 OR backend_type IN ('walwriter', 'checkpointer', 'background writer',
                                     'autovacuum worker', 'autovacuum launcher')) AS pids`,
    [database],
  );
  const row = rows[0]!;
  let cpu: Map<number, number> | null = new Map();
  for (const pid of row.pids) {
    const seconds = procCpuSeconds(pid);
    if (seconds === null || !isPostgres(pid)) {
      cpu = null;
      break;
    }
    cpu.set(pid, seconds);
  }
  return { at: performance.now(), walLsn: row.lsn, xacts: Number(row.xacts), cpu };
}

function isPostgres(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim().startsWith('postgres');
  } catch {
    return false;
  }
}

/**
 * Transactions of the database once its client backends have exited: a backend publishes its
 * counts at most once a second while connected, and always when it exits.
 */
export async function settledXacts(
  client: pg.Client,
  database: string,
  /** Backends allowed to stay (a process that keeps its pool open). */
  remaining = 0,
): Promise<number> {
  const deadline = performance.now() + 3_000;
  while (performance.now() < deadline) {
    const { rows } = await client.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
      [database],
    );
    if (rows[0]!.n <= remaining) break;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const { rows } = await client.query<{ xacts: string }>(
    'SELECT (xact_commit + xact_rollback)::text AS xacts FROM pg_stat_database WHERE datname = $1',
    [database],
  );
  return Number(rows[0]!.xacts);
}

export interface ServerDelta {
  walBytes: number;
  xacts: number;
  /** PostgreSQL CPU seconds, or null when not measurable. */
  cpuSeconds: number | null;
}

export async function serverDelta(
  client: pg.Client,
  before: ServerSample,
  after: ServerSample,
  xactsAfter: number = after.xacts,
): Promise<ServerDelta> {
  const { rows } = await client.query<{ bytes: string }>(
    'SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::text AS bytes',
    [after.walLsn, before.walLsn],
  );
  let cpuSeconds: number | null = null;
  if (before.cpu && after.cpu) {
    cpuSeconds = 0;
    for (const [pid, seconds] of after.cpu) cpuSeconds += seconds - (before.cpu.get(pid) ?? 0);
  }
  return { walBytes: Number(rows[0]!.bytes), xacts: xactsAfter - before.xacts, cpuSeconds };
}

/**
 * CPU seconds used so far by every process of this name (`/proc/<pid>/comm`), e.g. a broker on
 * the same machine; null when there is none visible.
 */
export function processCpuSeconds(name: string): number | null {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return null;
  }
  let total: number | null = null;
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    let comm: string;
    try {
      comm = readFileSync(`/proc/${entry}/comm`, 'utf8').trim();
    } catch {
      continue;
    }
    if (comm !== name) continue;
    const seconds = procCpuSeconds(Number(entry));
    if (seconds !== null) total = (total ?? 0) + seconds;
  }
  return total;
}

export function cpuVisible(): boolean {
  try {
    return readdirSync('/proc').length > 0;
  } catch {
    return false;
  }
}

/**
 * Median time of a one-row INSERT committed on its own: the floor under every durable enqueue
 * and every claim on this server (dominated by the WAL flush when synchronous_commit is on).
 */
export async function commitLatencyMs(adminUrl: string, samples = 50): Promise<number> {
  const db = await freshDatabase(adminUrl);
  try {
    return await withAdmin(db.url, async (c) => {
      await c.query('CREATE TABLE probe (id bigserial PRIMARY KEY, at timestamptz DEFAULT now())');
      const times: number[] = [];
      for (let i = 0; i < samples; i++) {
        const started = performance.now();
        await c.query('INSERT INTO probe DEFAULT VALUES');
        times.push(performance.now() - started);
      }
      times.sort((a, b) => a - b);
      return times[times.length >> 1]!;
    });
  } finally {
    await db.drop();
  }
}
