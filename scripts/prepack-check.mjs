// A package's `prepack` runs this before it cleans and builds the package itself: the build
// compiles against the dist/ of the workspace packages it depends on, and without them tsc fails
// with a TS2307 per import. This names what is missing and what to run instead.
// Run from the package's directory (npm and pnpm run lifecycle scripts there).
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const own = JSON.parse(readFileSync('package.json', 'utf8'));
const workspaceDeps = Object.entries({
  ...own.dependencies,
  ...own.peerDependencies,
  ...own.devDependencies,
})
  .filter(([, range]) => String(range).startsWith('workspace:'))
  .map(([name]) => name);

const unbuilt = workspaceDeps.filter((name) => {
  const dir = join('node_modules', name);
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  // The file the build's imports resolve to; a private workspace package may have none.
  const entry = manifest.private ? undefined : (manifest.types ?? manifest.main);
  return entry !== undefined && !existsSync(join(dir, entry));
});

if (unbuilt.length > 0) {
  process.stderr.write(
    `${own.name}: cannot pack before ${unbuilt.join(', ')} ${unbuilt.length > 1 ? 'are' : 'is'} built ` +
      `(no dist/ to compile against).\n` +
      'Run `pnpm build` at the repository root first, or `pnpm pack:all` there to build and pack ' +
      'every package.\n',
  );
  process.exit(1);
}
