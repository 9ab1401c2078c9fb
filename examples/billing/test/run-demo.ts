import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const repoRoot = fileURLToPath(new URL('../../..', import.meta.url));

export interface DemoRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `pnpm demo <args>` from the repository root, exactly as the READMEs show it. Past
 * `timeoutMs` the whole process group gets SIGINT (the demo then stops its workers and drops its
 * database), and SIGKILL if it is still there 10 s later, so a hung run never outlives its test.
 */
export function runDemo(
  args: string[],
  env: NodeJS.ProcessEnv = {},
  timeoutMs = 100_000,
): Promise<DemoRun> {
  return new Promise((resolve, reject) => {
    const child = spawn('pnpm', ['demo', ...args], {
      cwd: repoRoot,
      env: { ...process.env, NO_COLOR: '1', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let stdout = '';
    let stderr = '';
    const signalGroup = (signal: NodeJS.Signals) => {
      try {
        process.kill(-child.pid!, signal);
      } catch {
        // Already gone.
      }
    };
    const interrupt = setTimeout(() => signalGroup('SIGINT'), timeoutMs);
    const kill = setTimeout(() => signalGroup('SIGKILL'), timeoutMs + 10_000);
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(interrupt);
      clearTimeout(kill);
      resolve({ code, stdout, stderr });
    });
  });
}
