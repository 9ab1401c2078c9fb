import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const repoRoot = fileURLToPath(new URL('../../..', import.meta.url));

export interface DemoRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `pnpm demo <args>` from the repository root, exactly as the READMEs show it. */
export function runDemo(args: string[], env: NodeJS.ProcessEnv = {}): Promise<DemoRun> {
  return new Promise((resolve, reject) => {
    const child = spawn('pnpm', ['demo', ...args], {
      cwd: repoRoot,
      env: { ...process.env, NO_COLOR: '1', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}
