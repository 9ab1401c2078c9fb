import { runCli } from './cli.js';

const code = await runCli(process.argv.slice(2), {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  env: process.env,
  cwd: process.cwd(),
});
// Exit explicitly once output is flushed: a user's job module may hold handles (timers, pools)
// that would otherwise keep a stopped worker process alive.
process.stdout.write('', () => process.stderr.write('', () => process.exit(code)));
