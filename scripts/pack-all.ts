// `pnpm pack:all [dir]`: builds and packs every publishable package into `dir` (default
// dist-tarballs/ at the repository root), ready for `npm install <dir>/*.tgz` in a project
// outside this repository while the packages are not on a registry.
import { relative, resolve } from 'node:path';
import { packAll, repoRoot } from './pack.js';

// pnpm runs scripts from the repository root; a relative dir is the caller's (INIT_CWD).
const cwd = process.env.INIT_CWD ?? process.cwd();
const destination = resolve(cwd, process.argv[2] ?? resolve(repoRoot, 'dist-tarballs'));

try {
  const tarballs = await packAll(destination, (pkg, tarball) =>
    console.log(`packed ${pkg.name}: ${relative(cwd, tarball) || tarball}`),
  );
  console.log(
    `\n${tarballs.length} tarballs in ${destination}\n` +
      // The README's command: the tarballs together, by absolute path (a project elsewhere runs
      // it), with the peers not every package manager installs.
      `Install them in your project with:\n  npm install ${destination}/*.tgz pg drizzle-orm @opentelemetry/api`,
  );
} catch (error) {
  process.stderr.write(`pnpm pack:all: ${(error as Error).message}\n`);
  process.exit(1);
}
