// Fails when the drizzle schema and the committed migrations disagree: regenerates the migrations
// and looks for any change under migrations/. Leaves the tree as it found it.
import { execFileSync } from 'node:child_process';

const run = (cmd, args) =>
  execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const changes = () =>
  run('git', ['status', '--porcelain', '--untracked-files=all', '--', 'migrations']).trim();

if (changes()) {
  console.error(
    'migrations/ has uncommitted changes; commit them before the drift check:\n' + changes(),
  );
  process.exit(1);
}
run('pnpm', ['exec', 'drizzle-kit', 'check']);
run('pnpm', ['exec', 'drizzle-kit', 'generate', '--name', 'drift_check']);
const drift = changes();
if (drift) {
  console.error(
    'schema drift: the drizzle schema differs from migrations/. Run `pnpm db:generate` and commit.\n' +
      drift,
  );
  console.error(run('git', ['diff', '--', 'migrations']));
  run('git', ['checkout', '--', 'migrations']);
  run('git', ['clean', '-fdq', '--', 'migrations']);
  process.exit(1);
}
console.log('migrations match the schema');
