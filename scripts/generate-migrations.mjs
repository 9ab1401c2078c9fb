// Runs drizzle-kit generate for every package that owns tables, each into its own migrations/
// folder: `pnpm db:generate --name what_changed`. Arguments are passed to every run.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { migrationPackages } from './migration-packages.mjs';

const drizzleKit = fileURLToPath(new URL('../node_modules/.bin/drizzle-kit', import.meta.url));
for (const dir of migrationPackages) {
  console.log(`==> ${dir}`);
  execFileSync(
    drizzleKit,
    ['generate', '--config', 'drizzle.config.ts', ...process.argv.slice(2)],
    {
      cwd: fileURLToPath(new URL(`../${dir}/`, import.meta.url)),
      stdio: 'inherit',
    },
  );
}
