import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../../test/support/db.js';

const tsxLoader = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const db = await useTestDatabase();

/** Runs a README program as its own process, as a reader would, on this file's database. */
async function runProgram(name: string): Promise<string> {
  const script = fileURLToPath(new URL(`../src/${name}`, import.meta.url));
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', tsxLoader, script], {
    env: { ...process.env, DATABASE_URL: db.url, SKIPLOCK_LOG_LEVEL: 'warn' },
    timeout: 60_000,
  });
  // pino's JSON lines are the library's logs; the program's own output is plain text.
  return stdout
    .split('\n')
    .filter((line) => line && !line.startsWith('{'))
    .join('\n');
}

describe('the README programs', () => {
  it('queue.ts enqueues one job and a worker completes it', async () => {
    expect(await runProgram('queue.ts')).toMatch(
      /^job \d+: completed; sent inv_1 to ada@example\.com \(key .+\)$/,
    );
  });

  it('saga.ts completes one saga and compensates the declined one', async () => {
    expect(await runProgram('saga.ts')).toBe(
      [
        'saga inv_1: completed (reserve → charge)',
        'saga inv_2: compensated (reserve → charge → undo reserve)',
        'reservations still held: 1',
      ].join('\n'),
    );
  });
});
