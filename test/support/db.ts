import { cloneDatabase, dropDatabase } from '@skiplock/devdb';
import pg from 'pg';
import { pino, type Logger } from 'pino';
import { afterAll, inject } from 'vitest';

export interface TestDatabase {
  url: string;
  pool: pg.Pool;
  /** Every pool made here is ended, and the database dropped, after the file's tests. */
  newPool(max?: number): pg.Pool;
}

/** A database of this test file's own, cloned from the migrated template. */
export async function useTestDatabase(): Promise<TestDatabase> {
  const adminUrl = inject('adminUrl');
  const { name, url } = await cloneDatabase(
    adminUrl,
    inject('templateDatabase'),
    inject('runPrefix').replace(/_$/, ''),
  );
  const pools: pg.Pool[] = [];
  const newPool = (max = 10) => {
    const pool = new pg.Pool({ connectionString: url, max });
    pool.on('error', () => {});
    pools.push(pool);
    return pool;
  };
  const pool = newPool();
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end().catch(() => {})));
    await dropDatabase(adminUrl, name);
  });
  return { url, pool, newPool };
}

export interface CapturedLogs {
  logger: Logger;
  lines: Record<string, unknown>[];
  reasons(): string[];
}

/** A pino logger whose lines a test can assert on. */
export function captureLogs(): CapturedLogs {
  const lines: Record<string, unknown>[] = [];
  const logger = pino(
    { level: 'debug' },
    {
      write(line: string) {
        lines.push(JSON.parse(line) as Record<string, unknown>);
      },
    },
  );
  return { logger, lines, reasons: () => lines.map((l) => String(l.reason)) };
}
