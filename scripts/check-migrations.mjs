// Fails when a package's drizzle schema and its committed migrations disagree: regenerates each
// package's migrations and looks for any change under its migrations/. Leaves the tree as it
// found it.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { migrationPackages } from './migration-packages.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const drizzleKit = fileURLToPath(new URL('../node_modules/.bin/drizzle-kit', import.meta.url));
const run = (cmd, args, cwd = root) =>
  execFileSync(cmd, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const folders = migrationPackages.map((dir) => `${dir}/migrations`);
const changes = () =>
  run('git', ['status', '--porcelain', '--untracked-files=all', '--', ...folders]).trim();

if (changes()) {
  console.error(
    'migrations have uncommitted changes; commit them before the drift check:\n' + changes(),
  );
  process.exit(1);
}
for (const dir of migrationPackages) {
  const cwd = `${root}/${dir}`;
  run(drizzleKit, ['check', '--config', 'drizzle.config.ts'], cwd);
  run(drizzleKit, ['generate', '--config', 'drizzle.config.ts', '--name', 'drift_check'], cwd);
}
const drift = changes();
if (drift) {
  console.error(
    'schema drift: a drizzle schema differs from its migrations. Run `pnpm db:generate` and commit.\n' +
      drift,
  );
  console.error(run('git', ['diff', '--', ...folders]));
  run('git', ['checkout', '--', ...folders]);
  run('git', ['clean', '-fdq', '--', ...folders]);
  process.exit(1);
}
console.log(`migrations match the schema in ${migrationPackages.join(', ')}`);
