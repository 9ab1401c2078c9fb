/**
 * Where each saga engine's WAL goes: the sagas scenario's saga (`billing`: create invoice →
 * charge, every 10th declined and compensated → receipt; or `fanout`), run on skiplock and on
 * DBOS, each in a fresh database, with the WAL records of the measured sagas grouped by relation
 * and record type (PostgreSQL's `pg_walinspect`, a contrib extension of PostgreSQL 15 and later;
 * creating it needs a superuser). bench/README.md keeps the table for the committed code, so a
 * change in what a saga writes shows as a diff.
 *
 *   pnpm --filter @skiplock/bench wal [--shape billing|fanout] [--sagas 200] [--in-flight 50]
 *
 * One system per process (DBOS keeps process-wide state): the parent runs itself once per system.
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { installQueryCounter } from './query-counter.js';
import { billingInput, BUSINESS_SCHEMA } from './sagas/billing.js';
import { sagaSystem } from './sagas/index.js';
import type { SagaShapeId } from './sagas/types.js';
import { freshDatabase, resolveServer } from './server.js';

const SYSTEMS = ['skiplock-saga', 'dbos'] as const;
const WARMUP = 20;
/** Smaller groups are summed into one row. */
const MIN_SHOWN_BYTES = 40;

interface Group {
  /** The table, for an index its table's. */
  table: string;
  relation: string;
  record: string;
  bytes: number;
  records: number;
}

interface SystemWal {
  system: string;
  sagas: number;
  walBytes: number;
  groups: Group[];
}

const { values } = parseArgs({
  options: {
    shape: { type: 'string', default: 'billing' },
    sagas: { type: 'string', default: '200' },
    'in-flight': { type: 'string', default: '50' },
    system: { type: 'string' },
  },
});
const shape = values.shape as SagaShapeId;
if (shape !== 'billing' && shape !== 'fanout') {
  throw new Error(`--shape must be billing or fanout, not ${JSON.stringify(values.shape)}`);
}
const count = Number(values.sagas);
const inFlight = Number(values['in-flight']);
for (const [name, n] of [
  ['--sagas', count],
  ['--in-flight', inFlight],
] as const) {
  if (!Number.isInteger(n) || n < 1 || n > 100_000) {
    throw new Error(`${name} must be an integer from 1 to 100000, not ${String(n)}`);
  }
}

/** Runs the sagas on one system in a fresh database and groups their WAL records. */
async function measure(systemId: string): Promise<SystemWal> {
  // The bench's saga engines tell a saga's end by the commit of its last transaction.
  installQueryCounter(() => false);
  const server = await resolveServer(() => {});
  const db = await freshDatabase(server.adminUrl);
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    try {
      await client.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
    } catch (error) {
      throw new Error(
        `the WAL breakdown needs the pg_walinspect extension (PostgreSQL 15+ contrib) and a superuser: ${(error as Error).message}`,
      );
    }
    await client.query(BUSINESS_SCHEMA);
    const system = await sagaSystem(systemId);
    await system.install(db.url);
    const engine = await system.engine(db.url, shape);
    const run = async (from: number, n: number) => {
      const running = new Set<Promise<void>>();
      for (let i = from; i < from + n; i++) {
        const { finished } = await engine.start(billingInput(i));
        const tracked = finished.then(() => void running.delete(tracked));
        running.add(tracked);
        if (running.size >= inFlight) await Promise.race(running);
      }
      await Promise.all(running);
    };
    await run(1_000_000, WARMUP);
    const lsn = async () =>
      (await client.query<{ l: string }>('SELECT pg_current_wal_insert_lsn()::text AS l')).rows[0]!
        .l;
    const start = await lsn();
    await run(0, count);
    const end = await lsn();
    await engine.close();
    const { rows } = await client.query<Group>(
      `SELECT coalesce(c.relname, CASE WHEN coalesce(r.block_ref, '') = '' THEN '(no relation)'
                                       ELSE '(other database)' END) AS relation,
              coalesce(t.relname, c.relname, CASE WHEN coalesce(r.block_ref, '') = ''
                       THEN '(no relation)' ELSE '(other database)' END) AS table,
              r.resource_manager || '/' || r.record_type AS record,
              sum(r.record_length)::float8 AS bytes, count(*)::float8 AS records
       FROM pg_get_wal_records_info($1, $2) r
       LEFT JOIN pg_class c
         ON c.relfilenode::text = substring(r.block_ref FROM 'rel \\d+/\\d+/(\\d+)')
        AND substring(r.block_ref FROM 'rel \\d+/(\\d+)/')::oid =
            (SELECT oid FROM pg_database WHERE datname = current_database())
       LEFT JOIN pg_index i ON i.indexrelid = c.oid
       LEFT JOIN pg_class t ON t.oid = i.indrelid
       GROUP BY 1, 2, 3`,
      [start, end],
    );
    const total = await client.query<{ b: string }>('SELECT ($2::pg_lsn - $1::pg_lsn)::text AS b', [
      start,
      end,
    ]);
    return { system: systemId, sagas: count, walBytes: Number(total.rows[0]!.b), groups: rows };
  } finally {
    await client.end();
    await db.drop();
    await server.stop();
  }
}

/** Bytes and records per saga of each table, its indexes included, largest first. */
function byTable(results: SystemWal[]): string {
  const sums = results.map((r) => {
    const m = new Map<string, { bytes: number; records: number }>();
    for (const g of r.groups) {
      const e = m.get(g.table) ?? { bytes: 0, records: 0 };
      e.bytes += g.bytes / r.sagas;
      e.records += g.records / r.sagas;
      m.set(g.table, e);
    }
    return m;
  });
  const tables = [...new Set(sums.flatMap((m) => [...m.keys()]))].sort(
    (a, b) =>
      Math.max(...sums.map((m) => m.get(b)?.bytes ?? 0)) -
      Math.max(...sums.map((m) => m.get(a)?.bytes ?? 0)),
  );
  const lines = [
    `WAL per saga by table, its indexes included (\`${shape}\`, ${count} sagas, ${inFlight} in flight):`,
    '',
    `| table | ${results.map((r) => `${r.system} B (records)`).join(' | ')} |`,
    `| --- | ${results.map(() => '---').join(' | ')} |`,
  ];
  for (const t of tables) {
    const cells = sums.map((m) => {
      const e = m.get(t);
      return e ? `${e.bytes.toFixed(0)} (${e.records.toFixed(2)})` : '';
    });
    lines.push(`| ${t} | ${cells.join(' | ')} |`);
  }
  return lines.join('\n');
}

function table(results: SystemWal[]): string {
  const per = (r: SystemWal, g: Group | undefined, key: 'bytes' | 'records') =>
    g ? g[key] / r.sagas : 0;
  const keys = new Map<string, number>();
  for (const r of results) {
    for (const g of r.groups) {
      const k = `${g.relation} · ${g.record}`;
      keys.set(k, Math.max(keys.get(k) ?? 0, g.bytes / r.sagas));
    }
  }
  const lines = [
    `WAL per saga (\`${shape}\`, ${count} sagas, ${inFlight} in flight), by relation and record:`,
    '',
    `| relation · record | ${results.map((r) => `${r.system} B (records)`).join(' | ')} |`,
    `| --- | ${results.map(() => '---').join(' | ')} |`,
  ];
  const sorted = [...keys].sort((a, b) => b[1] - a[1]);
  const shown = sorted.filter(([, bytes]) => bytes >= MIN_SHOWN_BYTES).map(([k]) => k);
  for (const k of shown) {
    const cells = results.map((r) => {
      const g = r.groups.find((x) => `${x.relation} · ${x.record}` === k);
      return g ? `${per(r, g, 'bytes').toFixed(0)} (${per(r, g, 'records').toFixed(2)})` : '';
    });
    lines.push(`| ${k} | ${cells.join(' | ')} |`);
  }
  const rest = results.map((r) => {
    const others = r.groups.filter((g) => !shown.includes(`${g.relation} · ${g.record}`));
    const bytes = others.reduce((sum, g) => sum + g.bytes, 0) / r.sagas;
    const records = others.reduce((sum, g) => sum + g.records, 0) / r.sagas;
    return `${bytes.toFixed(0)} (${records.toFixed(2)})`;
  });
  lines.push(`| everything under ${MIN_SHOWN_BYTES} B per saga | ${rest.join(' | ')} |`);
  const totals = results.map((r) => {
    const records = r.groups.reduce((s, g) => s + g.records, 0) / r.sagas;
    return `${(r.walBytes / r.sagas).toFixed(0)} (${records.toFixed(1)})`;
  });
  lines.push(`| **total (LSN difference)** | ${totals.join(' | ')} |`);
  return lines.join('\n');
}

if (values.system) {
  process.stdout.write(JSON.stringify(await measure(values.system)) + '\n');
  process.exit(0);
} else {
  const self = fileURLToPath(import.meta.url);
  const results = SYSTEMS.map((system) => {
    const out = execFileSync(
      process.execPath,
      [...process.execArgv, self, ...process.argv.slice(2), '--system', system],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 64 << 20 },
    );
    return JSON.parse(out.trim().split('\n').pop()!) as SystemWal;
  });
  console.log(byTable(results) + '\n\n' + table(results));
}
