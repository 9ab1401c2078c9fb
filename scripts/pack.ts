// Packs the publishable packages as `npm publish` would, for `pnpm pack:all` and the consumer
// test (test/consumer/run.ts): one list, one order, one way to pack.
import { execFile } from 'node:child_process';
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

export const repoRoot = fileURLToPath(new URL('..', import.meta.url));

export interface PublishedPackage {
  name: string;
  /** From the repository root, e.g. `packages/queue`. */
  dir: string;
}

interface Manifest {
  name: string;
  private?: boolean;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
}

/**
 * The packages under packages/ that are not private, each after the ones it depends on
 * (dependencies, peer and dev dependencies alike: its build compiles against their dist/).
 */
export async function publishedPackages(): Promise<PublishedPackage[]> {
  const manifests = new Map<string, { dir: string; manifest: Manifest }>();
  for (const entry of await readdir(join(repoRoot, 'packages'), { withFileTypes: true })) {
    if (!entry.isDirectory()) continue;
    const dir = `packages/${entry.name}`;
    const text = await readFile(join(repoRoot, dir, 'package.json'), 'utf8').catch(() => null);
    if (text === null) continue;
    const manifest = JSON.parse(text) as Manifest;
    if (!manifest.private) manifests.set(manifest.name, { dir, manifest });
  }
  const ordered: PublishedPackage[] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (name: string) => {
    if (state.get(name) === 'done') return;
    if (state.get(name) === 'visiting') throw new Error(`packages depend on each other: ${name}`);
    state.set(name, 'visiting');
    const { dir, manifest } = manifests.get(name)!;
    const deps = {
      ...manifest.dependencies,
      ...manifest.peerDependencies,
      ...manifest.devDependencies,
    };
    for (const dep of Object.keys(deps).sort()) if (manifests.has(dep)) visit(dep);
    state.set(name, 'done');
    ordered.push({ name, dir });
  };
  for (const name of [...manifests.keys()].sort()) visit(name);
  return ordered;
}

/** A tarball name `pnpm pack` gives a package: `@skiplock/queue` packs to `skiplock-queue-<version>.tgz`. */
function tarballPrefix(name: string): string {
  return `${name.replace(/^@/, '').replace('/', '-')}-`;
}

/**
 * Packs every publishable package into `destination` (made if missing; earlier tarballs of these
 * packages there are deleted, so a glob of it installs one version of each) and returns the
 * tarballs' paths in dependency order. Each package's prepack cleans and builds it, and packing
 * in dependency order builds each one's dependencies before it: a fresh clone needs no build
 * first. `onPacked` is told of each tarball as it is written.
 */
export async function packAll(
  destination: string,
  onPacked?: (pkg: PublishedPackage, tarball: string) => void,
): Promise<string[]> {
  const packages = await publishedPackages();
  await mkdir(destination, { recursive: true });
  const prefixes = packages.map((pkg) => tarballPrefix(pkg.name));
  for (const file of await readdir(destination)) {
    if (file.endsWith('.tgz') && prefixes.some((p) => file.startsWith(p))) {
      await rm(join(destination, file));
    }
  }
  const tarballs: string[] = [];
  for (const pkg of packages) {
    const before = new Set(await readdir(destination));
    try {
      await promisify(execFile)('pnpm', ['pack', '--pack-destination', destination], {
        cwd: join(repoRoot, pkg.dir),
        // The workspace's source condition is not for builds; what is packed is dist/.
        env: { ...process.env, NODE_OPTIONS: undefined },
        maxBuffer: 64 * 1024 * 1024,
      });
    } catch (error) {
      const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
      throw new Error(`pnpm pack in ${pkg.dir} failed\n${stdout}${stderr}`, { cause: error });
    }
    const written = (await readdir(destination)).filter(
      (f) => !before.has(f) && f.endsWith('.tgz'),
    );
    if (written.length !== 1) {
      throw new Error(
        `pnpm pack in ${pkg.dir} wrote ${written.length} tarballs: ${written.join(', ')}`,
      );
    }
    const tarball = join(destination, written[0]!);
    tarballs.push(tarball);
    onPacked?.(pkg, tarball);
  }
  return tarballs;
}
