import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cp, mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const packageDir = fileURLToPath(new URL('..', import.meta.url));

describe('billing migrations', () => {
  const dirs: string[] = [];
  afterAll(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

  // The example's own drift check: regenerating from src/schema.ts must add no migration.
  it('match the drizzle schema', { timeout: 60_000 }, async () => {
    // drizzle-kit wants an `--out` relative to its working directory; `.tmp/` is git-ignored.
    const out = join('.tmp', `drift-${randomBytes(4).toString('hex')}`);
    const absolute = join(packageDir, out);
    dirs.push(absolute);
    await mkdir(absolute, { recursive: true });
    await cp(join(packageDir, 'migrations'), absolute, { recursive: true });
    const before = await readdir(absolute, { recursive: true });
    const { stdout } = await run(
      'pnpm',
      [
        'exec',
        'drizzle-kit',
        'generate',
        '--dialect',
        'postgresql',
        '--schema',
        './src/schema.ts',
        '--out',
        out,
        '--name',
        'drift',
      ],
      { cwd: packageDir },
    );
    expect(stdout).toContain('No schema changes');
    expect(await readdir(absolute, { recursive: true })).toEqual(before);
  });
});
