import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runCli } from './run-cli.js';

const shape = fileURLToPath(
  new URL('../../../examples/billing/src/saga-shape.ts', import.meta.url),
);
const sagaReadme = fileURLToPath(new URL('../../saga/README.md', import.meta.url));

describe('skiplock sagas graph', () => {
  it("prints the billing saga's diagram, the one the saga README shows", async () => {
    const result = await runCli(['sagas', 'graph', 'billing', '--module', shape], {});
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const readme = await readFile(sagaReadme, 'utf8');
    // The README's diagram of the billing saga (it shows other diagrams too).
    const embedded = [...readme.matchAll(/```mermaid\n([^]*?)```/g)]
      .map((m) => m[1])
      .find((diagram) => diagram?.includes('start billing v'));
    expect(result.stdout).toBe(embedded);
    // The pivot is the charge, and the wait after it fails (for an operator) when it times out.
    expect(result.stdout).toMatch(/s3\{\{"charge-card \(pivot\)"\}\}/);
    expect(result.stdout).toContain('timeout 30 s (then failed)');
  });

  it('names what the module exports when the saga is not there, and needs --module', async () => {
    const missing = await runCli(['sagas', 'graph', 'nope', '--module', shape], {});
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('exports no saga named "nope"; it exports billing v2');
    const noModule = await runCli(['sagas', 'graph', 'billing'], {});
    expect(noModule.code).toBe(2);
    expect(noModule.stderr).toContain('--module FILE is required');
  });
});
