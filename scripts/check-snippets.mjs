// Every TypeScript snippet in a README is a complete program kept in a file that `pnpm typecheck`
// checks (and, where it needs a database, a test runs). A README marks each snippet with
// `<!-- program: path/from/repo/root.ts -->` before its code fence (only blank lines between, as
// Prettier writes it); this script fails when a snippet differs from its file or a ts fence has
// no marker. `--write` copies the files into the READMEs.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const readmes = [
  'README.md',
  'packages/queue/README.md',
  'packages/saga/README.md',
  'packages/cli/README.md',
  'packages/outbox/README.md',
  'packages/dashboard/README.md',
  'examples/billing/README.md',
];
const write = process.argv.includes('--write');
const problems = [];

for (const readme of readmes) {
  const text = readFileSync(`${root}/${readme}`, 'utf8');
  const lines = text.split('\n');
  const out = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    out.push(line);
    if (!/^```(ts|typescript)\s*$/.test(line)) continue;
    // Prettier puts a blank line between the marker (an HTML block) and the fence.
    let before = i - 1;
    while (before > 0 && lines[before] === '') before--;
    const marker = /^<!-- program: (\S+) -->$/.exec(lines[before] ?? '');
    let end = i + 1;
    while (end < lines.length && lines[end] !== '```') end++;
    if (!marker) {
      problems.push(`${readme}:${i + 1}: a ts snippet without <!-- program: file --> before it`);
      out.push(...lines.slice(i + 1, end + 1));
      i = end;
      continue;
    }
    let program;
    try {
      program = readFileSync(`${root}/${marker[1]}`, 'utf8').replace(/\n$/, '');
    } catch {
      problems.push(`${readme}:${i}: ${marker[1]} does not exist`);
      program = lines.slice(i + 1, end).join('\n');
    }
    const snippet = lines.slice(i + 1, end).join('\n');
    if (snippet !== program && !write) {
      problems.push(`${readme}:${i + 1}: differs from ${marker[1]} (run pnpm docs:write)`);
    }
    out.push(...(write ? program : snippet).split('\n'), '```');
    i = end;
  }
  if (write) writeFileSync(`${root}/${readme}`, out.join('\n'));
}
if (problems.length > 0) {
  console.error(problems.join('\n'));
  process.exit(1);
}
console.log(write ? 'READMEs updated from their programs' : 'README snippets match their programs');
